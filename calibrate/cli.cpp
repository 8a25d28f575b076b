#include "calibrate/cli.hpp"

#include <boost/program_options.hpp>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include "calibrate/fake_device.hpp"
#include "calibrate/fit.hpp"
#include "calibrate/merge.hpp"
#include "calibrate/plan.hpp"
#include "calibrate/report.hpp"
#include "calibrate/runner.hpp"
#include "calibrate/validate.hpp"
#include "common/build_info.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "models/architecture.hpp"
#include "models/profile.hpp"
#include "traces/trace.hpp"

namespace po = boost::program_options;

namespace moesim::calibrate {

using common::UsageError;

std::string base_profile_for(const std::string& name) {
  if (name.find("H200") != std::string::npos) return "h200";
  if (name.find("A100") != std::string::npos) return "a100-sxm";
  return "h100-sxm";
}

std::vector<double> read_traffic_matrix(const std::string& path, int ranks) {
  std::ifstream in(path);
  if (!in) throw common::InputError(path + ": cannot read the traffic matrix");
  std::vector<double> w;
  std::string line;
  int row = 0, line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[line.find_first_not_of(" \t")] == '#') continue;
    for (char& ch : line)
      if (ch == ',') ch = ' ';
    std::istringstream s(line);
    std::vector<double> values;
    std::string tok;
    while (s >> tok) {
      char* end = nullptr;
      const double v = std::strtod(tok.c_str(), &end);
      if (end != tok.c_str() + tok.size() || !std::isfinite(v) || v < 0)
        throw common::InputError(path + ":" + std::to_string(line_no) +
                                 ": expected a non-negative number, got \"" + tok + "\"");
      values.push_back(v);
    }
    if (static_cast<int>(values.size()) != ranks)
      throw common::InputError(path + ":" + std::to_string(line_no) + ": expected " + std::to_string(ranks) +
                               " values (one per GPU, --gpus), got " + std::to_string(values.size()));
    w.insert(w.end(), values.begin(), values.end());
    ++row;
  }
  if (row != ranks)
    throw common::InputError(path + ": expected " + std::to_string(ranks) + " rows (one per GPU, --gpus), got " +
                             std::to_string(row));
  return w;
}

namespace {

const char* kUsage =
    "Usage: moesim-calibrate [--plan quick|full] [--gpus N] [--dtypes LIST] [-b 1K -e 1G -f 2] -o profile.yaml\n"
    "       moesim-calibrate --dry-run [--plan quick|full] [--gpus N] ...\n"
    "       moesim-calibrate --list-devices\n"
    "       moesim-calibrate validate --profile P --trace T [--layers 0,1] [--batches 97,1000,3333]\n"
    "Measures GEMM, collective, contention and power costs on this machine's GPUs and writes a moesim\n"
    "profile (every measured value `source: measured`, the rest from a base profile), a raw JSON of every\n"
    "measurement beside it, and nccl-tests-style tables on the console. See docs/calibration.md.\n";

std::vector<long> parse_longs(const std::string& text, const char* option) {
  std::vector<long> out;
  std::stringstream s(text);
  std::string item;
  while (std::getline(s, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || end != item.c_str() + item.size())
      throw UsageError(std::string(option) + ": expected comma-separated integers, got \"" + text + "\"");
    out.push_back(v);
  }
  return out;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  std::string item;
  while (std::getline(s, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

po::variables_map parse(const po::options_description& desc, const std::vector<std::string>& args) {
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + " (see --help)");
  }
  return vm;
}

constexpr const char* kFakeDeviceHelp =
    "measure a simulated device with known costs instead of a GPU (for testing scripts and pipelines; "
    "its name, host and build say fake, and so does every file written from it)";

// The device a run asked for: the fake one (calibrate/fake_device.hpp), or the environment's GPUs.
std::unique_ptr<Device> open_requested(const CliEnvironment& env, const DeviceRequest& request) {
  if (request.fake)
    return std::make_unique<FakeDevice>(request.gpus, "NVIDIA H200 (fake device: moesim-calibrate --fake-device)");
  return env.open_device(request);
}

int run_validate(const std::vector<std::string>& args, std::ostream& out, const CliEnvironment& env) {
  po::options_description desc("moesim-calibrate validate options");
  desc.add_options()("help,h", "print this help")("profile", po::value<std::string>(), "profile to predict with (name or path)")(
      "trace", po::value<std::string>(), "routing trace (.mtr or text) whose tokens per expert size the layer")(
      "layers", po::value<std::string>()->default_value("0"), "MoE layer indices into the trace, comma-separated")(
      "batches", po::value<std::string>()->default_value("97,1000,3333"),
      "tokens per window, comma-separated (not powers of two: off the profile's grid)")(
      "traffic-bytes", po::value<std::string>()->default_value("64M"),
      "bytes of the copy traffic that runs throughout the `traffic` cases (two micro-batches size theirs as a "
      "dispatch or combine of a half)")(
      "ctas", po::value<int>()->default_value(16), "CTAs of the copy kernel standing in for NCCL")(
      "tp", po::value<int>()->default_value(1), "tensor-parallel degree of the experts")(
      "iters,n", po::value<int>()->default_value(15), "samples per case")(
      "json", po::value<std::string>(), "also write the table as JSON here")("force", "replace an existing --json file")(
      "fake-device", kFakeDeviceHelp);
  const po::variables_map vm = parse(desc, args);
  if (vm.count("help")) {
    out << "Usage: moesim-calibrate validate --profile P --trace T [options]\n" << desc;
    return 0;
  }
  if (!vm.count("profile") || !vm.count("trace")) throw UsageError("validate needs --profile and --trace (see --help)");
  const std::string profile_name = vm["profile"].as<std::string>(), trace_path = vm["trace"].as<std::string>();
  const bool force = vm.count("force") > 0;
  if (vm.count("json")) common::check_can_write(vm["json"].as<std::string>(), force);
  const models::Profile profile = models::load_profile(profile_name);
  std::unique_ptr<traces::TraceReader> trace = traces::open_trace(trace_path);
  const models::Architecture arch = models::load_architecture(trace->meta().shape.architecture);
  std::vector<int> layers;
  for (long l : parse_longs(vm["layers"].as<std::string>(), "--layers")) layers.push_back(static_cast<int>(l));
  const std::vector<ValidationCase> cases = validation_cases(*trace, layers, parse_longs(vm["batches"].as<std::string>(), "--batches"));
  const int tp = vm["tp"].as<int>();
  if (tp < 1) throw UsageError("--tp: expected a positive integer");
  if (vm["ctas"].as<int>() < 0)
    throw UsageError("--ctas: expected a number of blocks (0: 4 per SM), got " + std::to_string(vm["ctas"].as<int>()));
  const Traffic traffic{"copy_kernel",
                        std::nullopt,
                        parse_size(vm["traffic-bytes"].as<std::string>(), "--traffic-bytes"),
                        1,
                        vm["ctas"].as<int>(),
                        {},
                        1};
  // Predictions first: a profile without the model's dtype (or an HBM rate for the two-micro-batch
  // traffic) fails before a GPU is touched.
  for (const ValidationCase& c : cases) predict_case(profile, arch, c, tp, models::CollectiveOp::kAllToAll, traffic);
  DeviceRequest request;
  request.fake = vm.count("fake-device") > 0;
  std::unique_ptr<Device> device = open_requested(env, request);
  print_context(out, device->info(), "validate");
  const Timing timing{3, std::max(3, vm["iters"].as<int>()), 0, 50e-6};
  const ValidationResult r = run_validation(*device, profile, arch, cases, tp, traffic, timing, out);
  if (vm.count("json"))
    common::write_file_atomic(vm["json"].as<std::string>(),
                              validation_to_json(r, device->info(), profile_name, trace_path).dump(2) + "\n", force);
  return 0;
}

// A stream that drops everything: the tables of ranks other than 0 (rank 0 prints its own, then the
// merged summary and the spread).
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c == traits_type::eof() ? 0 : c; }
};

struct ClusterRun {
  const po::variables_map& vm;
  const std::vector<std::string>& args;
  std::ostream& out;
  std::ostream& err;
  const CliEnvironment& env;
  const LaunchInfo& launch;
  double timeout;
  PlanOptions plan_options;
  std::filesystem::path output, raw;
  bool force;
};

// --fake-slow-rank R=F[,R=F]: a slowdown per rank (1 where not given).
std::vector<double> parse_slow_ranks(const std::string& text, int world) {
  std::vector<double> slow(static_cast<std::size_t>(world), 1.0);
  for (const std::string& item : split(text)) {
    const std::size_t eq = item.find('=');
    char* end = nullptr;
    const long r = eq == std::string::npos ? -1 : std::strtol(item.substr(0, eq).c_str(), &end, 10);
    const double f = eq == std::string::npos ? 0.0 : std::strtod(item.c_str() + eq + 1, nullptr);
    if (r < 0 || r >= world || !(f > 0.0) || !std::isfinite(f))
      throw UsageError("--fake-slow-rank: expected RANK=FACTOR with a rank below " + std::to_string(world) +
                       " and a positive factor, got \"" + item + "\"");
    slow[static_cast<std::size_t>(r)] = f;
  }
  return slow;
}

int exit_code_of(const std::exception& e) {
  if (const auto* c = dynamic_cast<const ClusterError*>(&e)) return c->exit_code();
  if (dynamic_cast<const common::UsageError*>(&e) || dynamic_cast<const common::InputError*>(&e))
    return common::kExitInputError;
  if (dynamic_cast<const common::RunError*>(&e)) return common::kExitRunFailure;
  return common::kExitInternal;
}

template <typename ApplyTiming>
int run_cluster(ClusterRun& c, const ApplyTiming& apply_timing) {
  const po::variables_map& vm = c.vm;
  std::string fingerprint;
  for (const std::string& a : c.args) fingerprint += a + '\x1f';
  std::unique_ptr<Cluster> cluster = Cluster::join(c.launch, c.timeout, fingerprint);
  const int rank = cluster->rank(), world = cluster->world();
  const bool root = rank == 0;
  NullBuffer null_buffer;
  std::ostream quiet(&null_buffer);
  std::ostream& log = root ? c.out : quiet;
  const std::string me = "rank " + std::to_string(rank) + " of " + std::to_string(world);
  std::unique_ptr<Device> device;
  try {
    const std::vector<int> nodes = cluster->node_of_rank();
    const int node_count = cluster->node_count();
    if (root) {
      c.out << "# moesim-calibrate cluster run: " << world << " ranks on " << node_count << " node"
            << (node_count > 1 ? "s" : "") << ", launcher " << c.launch.launcher << ", rank 0 listening on port "
            << c.launch.master_port << " (MASTER_ADDR " << c.launch.master_addr << " from " << c.launch.master_from
            << ")\n";
      for (const RankInfo& r : cluster->ranks())
        c.out << "#  rank " << r.rank << ": node " << nodes[static_cast<std::size_t>(r.rank)] << " (" << r.node
              << "), host " << r.host << ", local rank " << r.local_rank << ", pid " << r.pid << "\n";
      c.out
          << "# the tables below are rank 0's own measurements; the merged values and the per-GPU spread follow them\n";
      // Refuse before measuring; the other ranks write nothing.
      common::check_can_write(c.output, c.force);
      common::check_can_write(c.raw, c.force);
      if (vm.count("base")) models::load_profile(vm["base"].as<std::string>());
    } else {
      c.out << "moesim-calibrate: " << me << " (host " << cluster->ranks()[static_cast<std::size_t>(rank)].host
            << ", local rank " << c.launch.local_rank << ") joined rank 0 at " << c.launch.master_addr << ":"
            << c.launch.master_port << "; rank 0 prints the tables and writes the profile" << std::endl;
    }
    c.plan_options.node_of_rank = nodes;
    if (vm.count("fake-device")) {
      FakeWorld w;
      w.rank = rank;
      w.world = world;
      w.node_of_rank = nodes;
      if (vm.count("fake-slow-rank")) w.slowdown = parse_slow_ranks(vm["fake-slow-rank"].as<std::string>(), world);
      if (vm.count("fake-stall-rank")) {
        w.stall_rank = vm["fake-stall-rank"].as<int>();
        if (w.stall_rank < 0 || w.stall_rank >= world)
          throw UsageError("--fake-stall-rank: expected a rank below " + std::to_string(world) + ", got " +
                           std::to_string(w.stall_rank));
      }
      w.log = &c.err;
      device = std::make_unique<FakeDevice>(1, "NVIDIA H200 (fake device: moesim-calibrate --fake-device)", w);
    } else {
      ClusterHooks hooks;
      hooks.world = world;
      hooks.rank = rank;
      hooks.local_rank = c.launch.local_rank;
      hooks.broadcast = [&](const std::string& bytes) { return cluster->broadcast(bytes); };
      hooks.max = [&](double v) { return cluster->max(v); };
      device = c.env.open_device(
          DeviceRequest{1, c.plan_options.allow_set_power_limit, c.plan_options.allow_set_clocks, false, hooks});
    }
    const DeviceInfo info = device->info();
    // Every rank plans with the same fp8 choice: a mixed cluster is an error, not a silent plan split.
    c.plan_options.fp8_supported = cluster->max(info.fp8 ? 0.0 : 1.0) == 0.0;
    Plan plan = make_plan(c.plan_options);
    apply_timing(plan);

    Device* dev = device.get();
    std::ostream& err = c.err;
    const std::function<void(int)> hard_exit = c.env.hard_exit;
    StepWatchdog watchdog(
        c.timeout, 30.0,
        [dev, &err, me, t = c.timeout](const std::string& step) {
          err << "moesim-calibrate: " << me << ": '" << step << "' did not finish within " << t
              << " s (--rendezvous-timeout): another rank died or hung inside it; aborting the communication"
              << std::endl;
          dev->abort_communication();
        },
        [&err, me, hard_exit](const std::string& step) {
          err << "moesim-calibrate: " << me << ": '" << step
              << "' is still blocked 30 s after its communication was aborted; exiting" << std::endl;
          if (hard_exit) hard_exit(common::kExitRunFailure);
        });
    const PeerStep with_peers = [&](const std::string& label, const std::function<void()>& step) {
      cluster->barrier(label);
      watchdog.arm(label);
      try {
        step();
      } catch (...) {
        watchdog.disarm();
        if (watchdog.expired())
          throw ClusterError("'" + label + "' did not finish within " + std::to_string(static_cast<int>(c.timeout)) +
                             " s (--rendezvous-timeout): another rank died or hung inside it (the other ranks' output "
                             "names it); restart every rank");
        throw;
      }
      watchdog.disarm();
    };
    const Measurements mine = run_plan(*device, plan, log, c.env.interrupted, with_peers);
    device.reset();  // restores power limit and clocks before anything is merged or written
    const std::vector<std::string> all = cluster->gather(measurements_to_json(mine).dump());
    if (!root) {
      cluster->finish();
      c.out << "moesim-calibrate: " << me << ": measured and sent to rank 0, which wrote the profile" << std::endl;
      return 0;
    }
    std::vector<RankMeasurements> ranks;
    for (int r = 0; r < world; ++r) {
      const RankInfo& ri = cluster->ranks()[static_cast<std::size_t>(r)];
      ranks.push_back(
          {r, ri.host, ri.node,
           r == 0 ? mine : measurements_from_json(nlohmann::json::parse(all[static_cast<std::size_t>(r)]))});
    }
    const Measurements merged = merge_measurements(ranks, node_count);
    const Spread spread = gpu_spread(ranks, merged);
    print_spread(c.out, spread, ranks);

    const std::string base_name = vm.count("base") ? vm["base"].as<std::string>() : base_profile_for(info.name);
    const models::Profile base = models::load_profile(base_name);
    FitOptions fo;
    fo.name = vm.count("name") ? vm["name"].as<std::string>() : c.output.stem().string();
    fo.base = base_name;
    fo.method = "moesim-calibrate " + std::string(common::kVersion) + ", " + merged.started + ", " +
                plan_kind_name(plan.kind) + " plan, CUDA " + info.cuda_runtime + ", driver " + info.driver +
                ", cuBLASLt " + info.cublaslt + ", merged over " + std::to_string(world) + " ranks on " +
                std::to_string(node_count) + " node" + (node_count > 1 ? "s" : "") +
                " (median over the ranks of each rank's median)";
    const models::Profile profile = fit_profile(merged, base, fo);
    nlohmann::json raw_json = measurements_to_json(merged);
    nlohmann::json rank_list = nlohmann::json::array();
    for (const RankMeasurements& r : ranks) {
      // Each rank's records with their summaries; the samples stay out (they would multiply the file by
      // the rank count, and the merged records keep each rank's median).
      nlohmann::json records = measurements_to_json(r.m);
      for (auto& [section, list] : records.items())
        if (list.is_array())
          for (nlohmann::json& item : list) item.erase("samples_s");
      rank_list.push_back({{"rank", r.rank},
                           {"host", r.host},
                           {"node", r.node},
                           {"local_rank", cluster->ranks()[static_cast<std::size_t>(r.rank)].local_rank},
                           {"measurements", records}});
    }
    raw_json["cluster"] = {{"launcher", c.launch.launcher},
                           {"world", world},
                           {"nodes", node_count},
                           {"ranks", rank_list},
                           {"spread", spread_to_json(spread)}};
    write_outputs(profile, raw_json, c.output, c.raw, c.force);
    c.out << "# wrote " << c.output.string() << " (base " << base_name << ", merged over " << world << " ranks) and "
          << c.raw.string() << "\n";
    cluster->finish();
    return 0;
  } catch (const std::exception& e) {
    device.reset();
    const int code = exit_code_of(e);
    const std::string text = me + ": " + e.what();
    cluster->abort(code, text);
    throw ClusterError(text, code);
  }
}

int run_measure(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, const CliEnvironment& env) {
  po::options_description desc("moesim-calibrate options");
  desc.add_options()("help,h", "print this help")("version", "print the version")(
      "plan", po::value<std::string>()->default_value("quick"), "quick (about 2 min on one GPU) or full (under 5)")(
      "gpus,g", po::value<int>()->default_value(1), "GPUs of this node to drive (NCCL ranks)")(
      "dtypes", po::value<std::string>(), "GEMM dtypes, comma-separated: fp32,tf32,bf16,fp16,fp8")(
      "minbytes,b", po::value<std::string>(), "smallest collective size (nccl-tests -b)")(
      "maxbytes,e", po::value<std::string>(), "largest collective size (nccl-tests -e)")(
      "stepfactor,f", po::value<double>(), "size multiplier (nccl-tests -f)")(
      "warmup_iters,w", po::value<int>(), "warm-up launches per measurement")("iters,n", po::value<int>(),
                                                                              "samples per measurement")(
      "architectures", po::value<std::string>(), "architectures whose GEMM shapes to cover (default: all shipped)")(
      "traffic-matrix", po::value<std::string>(), "all-to-all traffic matrix file (gpus rows of gpus weights)")(
      "output,o", po::value<std::string>(), "profile to write (YAML)")(
      "raw", po::value<std::string>(), "raw JSON of every measurement (default: beside the profile, .raw.json)")(
      "name", po::value<std::string>(), "profile name (default: the output's file stem)")(
      "base", po::value<std::string>(), "reference profile for what is not measured (default: by GPU name)")(
      "force", "replace existing output files")("dry-run", "print what would run and how long it should take")(
      "list-devices", "list the GPUs and exit")("allow-set-power-limit",
                                                "sweep the power limit (restored on exit, error and signals)")(
      "allow-set-clocks", "sweep locked SM clocks (reset on exit, error and signals)")("fake-device", kFakeDeviceHelp)(
      "launcher", po::value<std::string>()->default_value("auto"),
      "one process per GPU under a launcher: auto (RANK/WORLD_SIZE, then OMPI_COMM_WORLD_*, then Slurm's srun "
      "variables), env, openmpi, slurm, or none (this process alone)")(
      "rendezvous-timeout", po::value<double>()->default_value(300.0),
      "seconds to connect the ranks and for any wait on another rank; a rank silent for longer is declared hung")(
      "fake-slow-rank", po::value<std::string>(),
      "with --fake-device under a launcher: R=F[,R=F]: rank R's fake GPU runs F times slower")(
      "fake-stall-rank", po::value<int>(),
      "with --fake-device under a launcher: rank R's fake GPU hangs in its first collective (robustness tests)");
  const po::variables_map vm = parse(desc, args);
  if (vm.count("help")) {
    out << kUsage << "\n" << desc << "\nBuild: " << env.build << "\n";
    return 0;
  }
  if (vm.count("version")) {
    out << "moesim-calibrate " << common::kVersion << " (" << common::kGitRevision << "), " << env.build << "\n";
    return 0;
  }
  if (vm.count("list-devices")) {
    for (const std::string& line : env.list_devices()) out << line << "\n";
    return 0;
  }
  PlanOptions plan_options;
  plan_options.kind = parse_plan_kind(vm["plan"].as<std::string>());
  plan_options.gpus = vm["gpus"].as<int>();
  if (plan_options.gpus < 1) throw UsageError("--gpus: expected at least 1, got " + std::to_string(plan_options.gpus));
  // Under a launcher each process drives one GPU and the plan covers every rank.
  LaunchInfo launch;
  if (!vm.count("dry-run"))
    launch = detect_launch(env.environment ? env.environment : process_environment(), vm["launcher"].as<std::string>());
  const double rendezvous_timeout = vm["rendezvous-timeout"].as<double>();
  if (!(rendezvous_timeout > 0.0) || !std::isfinite(rendezvous_timeout))
    throw UsageError("--rendezvous-timeout: expected a positive number of seconds");
  if (launch.world > 1) {
    if (!vm["gpus"].defaulted() && plan_options.gpus != 1)
      throw UsageError("--gpus " + std::to_string(plan_options.gpus) + " with " + launch.launcher + " starting " +
                       std::to_string(launch.world) +
                       " processes: each process drives one GPU (picked by its local "
                       "rank); start one process per GPU and drop --gpus");
    plan_options.gpus = launch.world;
  } else if (vm.count("fake-slow-rank") || vm.count("fake-stall-rank")) {
    throw UsageError(
        "--fake-slow-rank and --fake-stall-rank need several ranks started by a launcher (see --launcher)");
  }
  if ((vm.count("fake-slow-rank") || vm.count("fake-stall-rank")) && !vm.count("fake-device"))
    throw UsageError("--fake-slow-rank and --fake-stall-rank need --fake-device");
  if (vm.count("dtypes")) plan_options.dtypes = parse_dtypes(vm["dtypes"].as<std::string>());
  if (vm.count("minbytes") || vm.count("maxbytes") || vm.count("stepfactor")) {
    SizeRange r = plan_options.kind == PlanKind::kQuick ? SizeRange{1024.0, 268435456.0, 4.0} : SizeRange{};
    if (vm.count("minbytes")) r.begin = parse_size(vm["minbytes"].as<std::string>(), "-b/--minbytes");
    if (vm.count("maxbytes")) r.end = parse_size(vm["maxbytes"].as<std::string>(), "-e/--maxbytes");
    if (vm.count("stepfactor")) r.factor = vm["stepfactor"].as<double>();
    expand_sizes(r);  // reports a bad range before anything else happens
    plan_options.sizes = r;
  }
  if (vm.count("architectures")) plan_options.architectures = split(vm["architectures"].as<std::string>());
  if (vm.count("traffic-matrix")) plan_options.traffic_matrix = read_traffic_matrix(vm["traffic-matrix"].as<std::string>(), plan_options.gpus);
  plan_options.allow_set_power_limit = vm.count("allow-set-power-limit") > 0;
  plan_options.allow_set_clocks = vm.count("allow-set-clocks") > 0;
  auto apply_timing = [&](Plan& plan) {
    if (vm.count("warmup_iters")) plan.gemm_timing.warmup = plan.comm_timing.warmup = std::max(0, vm["warmup_iters"].as<int>());
    if (vm.count("iters")) {
      const int n = vm["iters"].as<int>();
      if (n < 1) throw UsageError("-n/--iters: expected at least 1");
      plan.gemm_timing.repetitions = plan.comm_timing.repetitions = n;
    }
  };

  if (vm.count("dry-run")) {
    const std::string base = vm.count("base") ? vm["base"].as<std::string>() : "h200";
    Plan plan = make_plan(plan_options);
    apply_timing(plan);
    out << describe_plan(plan, estimate_plan(plan, models::load_profile(base)));
    out << "# estimate from the " << base << " profile's tables; nothing was measured and no file was written\n";
    return 0;
  }

  if (!vm.count("output")) throw UsageError("no output: give -o/--output profile.yaml (or --dry-run, --list-devices)");
  const std::filesystem::path output = vm["output"].as<std::string>();
  const std::filesystem::path raw = vm.count("raw") ? std::filesystem::path(vm["raw"].as<std::string>()) : default_raw_path(output);
  const bool force = vm.count("force") > 0;
  if (launch.world > 1) {
    ClusterRun run{vm, args, out, err, env, launch, rendezvous_timeout, plan_options, output, raw, force};
    return run_cluster(run, apply_timing);
  }
  // Refuse before measuring: minutes of GPU time should not end in "file exists".
  common::check_can_write(output, force);
  common::check_can_write(raw, force);
  if (vm.count("base")) models::load_profile(vm["base"].as<std::string>());

  std::unique_ptr<Device> device = open_requested(env, DeviceRequest{plan_options.gpus,
                                                                     plan_options.allow_set_power_limit,
                                                                     plan_options.allow_set_clocks,
                                                                     vm.count("fake-device") > 0,
                                                                     {}});
  const DeviceInfo info = device->info();
  plan_options.fp8_supported = info.fp8;
  const std::string base_name = vm.count("base") ? vm["base"].as<std::string>() : base_profile_for(info.name);
  const models::Profile base = models::load_profile(base_name);
  Plan plan = make_plan(plan_options);
  apply_timing(plan);
  const PlanEstimate estimate = estimate_plan(plan, base);
  err << "moesim-calibrate: plan " << plan_kind_name(plan.kind) << ", estimated " << static_cast<int>(estimate.total())
      << " s on " << info.name << "\n";
  const Measurements m = run_plan(*device, plan, out, env.interrupted);
  device.reset();  // restores power limit and clocks before files are written

  FitOptions fo;
  fo.name = vm.count("name") ? vm["name"].as<std::string>() : output.stem().string();
  fo.base = base_name;
  fo.method = "moesim-calibrate " + std::string(common::kVersion) + ", " + m.started + ", " + plan_kind_name(plan.kind) +
              " plan, CUDA " + info.cuda_runtime + ", driver " + info.driver + ", cuBLASLt " + info.cublaslt;
  const models::Profile profile = fit_profile(m, base, fo);
  write_outputs(profile, m, output, raw, force);
  out << "# wrote " << output.string() << " (base " << base_name << ") and " << raw.string() << "\n";
  return 0;
}

}  // namespace

int calibrate_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, const CliEnvironment& env) {
  try {
    if (!args.empty() && args.front() == "validate") return run_validate({args.begin() + 1, args.end()}, out, env);
    return run_measure(args, out, err, env);
  } catch (const ClusterError& e) {
    err << "moesim-calibrate: " << e.what() << "\n";
    return e.exit_code();
  } catch (const NoGpuError& e) {
    err << "moesim-calibrate: no GPU: " << e.what() << "\n";
    return common::kExitRunFailure;
  } catch (const common::RunError& e) {
    err << "moesim-calibrate: error: " << e.what() << "\n";
    return common::kExitRunFailure;
  } catch (const common::UsageError& e) {
    err << "moesim-calibrate: " << e.what() << "\n";
    return common::kExitInputError;
  } catch (const common::InputError& e) {
    err << "moesim-calibrate: " << e.what() << "\n";
    return common::kExitInputError;
  } catch (const std::exception& e) {
    err << "moesim-calibrate: internal error: " << e.what() << "\n";
    return common::kExitInternal;
  }
}

}  // namespace moesim::calibrate
