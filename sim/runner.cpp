#include "sim/runner.hpp"

#include <sched.h>
#include <unistd.h>
#include <xbt/base.h>
#include <simgrid/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <thread>
#include <tuple>

#include "common/build_info.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "common/hash.hpp"
#include "models/costs.hpp"
#include "traces/trace.hpp"

namespace moesim::sim {

namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Inputs {
  models::Architecture arch;
  models::Cluster cluster;
  models::Profile profile;
  Placement placement;
  bool has_placement = false;
  int ep = 1;
  int tp = 1;
  std::string trace_sha256;
  std::string placement_file;  // the cached placement file, with RunOptions::placement_cache
  bool placement_solved = false;
};

// The variants of a study share their trace: hash each file once per process (keyed by path, size
// and modification time, so a file rewritten in between is hashed again).
std::string cached_sha256(const std::string& path) {
  static std::map<std::string, std::string> cache;
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  const auto mtime = std::filesystem::last_write_time(path, ec).time_since_epoch().count();
  const std::string key = path + "|" + std::to_string(size) + "|" + std::to_string(mtime);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, common::sha256_file(path)).first;
  return it->second;
}

// Prefill, decode and MoE training replay a trace; dense training and synthetic workloads need none.
bool needs_trace(const Scenario& s, const models::Architecture& arch) {
  if (s.workload.mode == WorkloadMode::kSynthetic) return false;
  if (s.workload.mode == WorkloadMode::kTraining) return arch.is_moe();
  return true;
}

// What a solved placement depends on; equal keys give equal placements (policies are deterministic).
nlohmann::json placement_cache_key(const Scenario& s, const Inputs& in) {
  nlohmann::json key = {{"policy", s.placement.policy},
          {"replicas", s.placement.replicas},
          {"groups", s.placement.groups},
          {"seed", s.seed},
          {"architecture", in.arch.name},
          {"architecture_sha256", common::sha256_file(in.arch.source_file)},
          {"cluster", in.cluster.name},
          {"cluster_sha256", common::sha256_file(in.cluster.source_file)},
          {"ep", in.ep},
          {"tp", in.tp}};
  // A policy that reads no routing (contiguous, round_robin) gives the same placement for any trace.
  if (!in.trace_sha256.empty()) key["trace_sha256"] = in.trace_sha256;
  return key;
}

// Solver reports carry wall-clock seconds; a cached placement drops them so that the same input
// gives the same file, byte for byte, in every shard.
nlohmann::json without_wall_times(const nlohmann::json& report) {
  if (report.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& x : report) out.push_back(without_wall_times(x));
    return out;
  }
  if (!report.is_object()) return report;
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [k, v] : report.items())
    if (k != "seconds" && k != "wall_s") out[k] = without_wall_times(v);
  return out;
}

Inputs load_inputs(const Scenario& s, const RunOptions& options) {
  Inputs in;
  in.arch = models::load_architecture(s.architecture);
  in.cluster = models::load_cluster(s.cluster);
  in.profile = models::load_profile(s.profile.empty() ? in.cluster.gpu_kind : s.profile);
  in.tp = s.tp;
  in.ep = s.ep > 0 ? s.ep : in.cluster.total_gpus() / std::max(1, s.tp);
  if (in.ep * in.tp > in.cluster.total_gpus())
    throw common::InputError("ep x tp = " + std::to_string(in.ep * in.tp) + " GPUs, but cluster " + in.cluster.name +
                             " has " + std::to_string(in.cluster.total_gpus()));
  if (needs_trace(s, in.arch)) {
    if (!in.arch.is_moe())
      throw common::InputError("architecture " + in.arch.name + " is dense: prefill and decode replay a routing trace of an MoE model");
    if (s.trace.empty()) throw common::InputError("workload.mode " + workload_mode_name(s.workload.mode) + " needs a trace");
    auto reader = traces::open_trace(s.trace);
    const auto& shape = reader->meta().shape;
    if (shape.layers != in.arch.moe_layers || shape.num_experts != in.arch.num_experts || shape.top_k != in.arch.top_k)
      throw common::InputError(s.trace + ": the trace's routing shape (" + std::to_string(shape.layers.size()) + " MoE layers, " +
                               std::to_string(shape.num_experts) + " experts, top-" + std::to_string(shape.top_k) +
                               ") does not match architecture " + in.arch.name + " (" +
                               std::to_string(in.arch.moe_layers.size()) + " MoE layers, " +
                               std::to_string(in.arch.num_experts) + " experts, top-" + std::to_string(in.arch.top_k) + ")");
    if (!s.placement.file.empty()) {
      in.placement = load_placement(s.placement.file);
      validate_placement(in.placement, in.arch, s.placement.file);
      if (in.placement.ep != in.ep)
        throw common::InputError(s.placement.file + ": the placement is for " + std::to_string(in.placement.ep) +
                                 " EP ranks, the scenario runs " + std::to_string(in.ep));
    } else {
      // The trace's hash keys a placement solved on its routing; for the results alone it is
      // computed while the simulations run (run_variant).
      const auto registry = default_placement_registry();
      const auto policy = registry.create(s.placement.policy);
      if (policy->needs_routing()) in.trace_sha256 = cached_sha256(s.trace);
      auto solve = [&] {
        RoutingCounts routing;
        if (policy->needs_routing()) {
          auto r = traces::open_trace(s.trace);
          routing = count_routing(*r, in.trace_sha256);
        }
        PlacementOptions opts;
        opts.replicas = s.placement.replicas;
        opts.groups = s.placement.groups;
        opts.seed = s.seed;
        PlacementInput pin{in.arch, in.cluster, in.ep, in.tp, policy->needs_routing() ? &routing : nullptr, opts};
        Placement p = policy->place(pin);
        validate_placement(p, in.arch, "placement policy " + s.placement.policy);
        return p;
      };
      if (options.placement_cache.empty()) {
        in.placement = solve();
      } else {
        const nlohmann::json key = placement_cache_key(s, in);
        const fs::path file =
            fs::path(options.placement_cache) / (s.placement.policy + "-" + common::sha256_hex(key.dump()).substr(0, 12) + ".yaml");
        std::error_code ec;
        if (!fs::exists(file, ec)) {
          Placement p = solve();
          p.report = without_wall_times(p.report);
          p.report["cache_key"] = key;
          fs::create_directories(file.parent_path(), ec);
          if (ec) throw common::RunError("cannot create " + file.parent_path().string() + ": " + ec.message());
          save_placement(p, file.string(), true);
          in.placement_solved = true;
        }
        // Read back even when just solved, so every variant runs the placement as the file holds it.
        in.placement = load_placement(file.string());
        if (!in.placement.report.contains("cache_key") || in.placement.report["cache_key"] != key)
          throw common::InputError(file.string() + ": this cached placement was solved for other inputs than this variant's (" +
                                   key.dump() + "); delete the file and run again to solve it afresh");
        validate_placement(in.placement, in.arch, file.string());
        if (in.placement.ep != in.ep || in.placement.tp != in.tp)
          throw common::InputError(file.string() + ": the cached placement is for ep " + std::to_string(in.placement.ep) +
                                   ", tp " + std::to_string(in.placement.tp) + ", the scenario runs ep " +
                                   std::to_string(in.ep) + ", tp " + std::to_string(in.tp) +
                                   "; delete the file and run again to solve it afresh");
        in.placement_file = file.string();
      }
    }
    in.has_placement = true;
  }
  return in;
}

std::unique_ptr<StepSource> make_source(const Scenario& s, traces::TraceReader& reader, int dp) {
  if (s.workload.mode == WorkloadMode::kDecode) return make_decode_source(reader, dp, s.workload.batch_sequences);
  return make_prefill_source(reader, dp, s.workload.tokens_per_step);
}

// Per MoE layer, sequential or overlapped with 2 or 4 chunks: a two-stream pipeline estimate on the
// first step's routing, with the profile's contention factors, for the slowest EP rank.
std::vector<int> choose_auto_chunks(const Scenario& s, const Inputs& in, nlohmann::json& decisions) {
  auto reader = traces::open_trace(s.trace);
  auto source = make_source(s, *reader, in.ep);
  StepBatch batch;
  source->next(batch);
  const auto& arch = in.arch;
  const std::size_t L = arch.moe_layers.size();
  const int k = arch.top_k;
  const double token_bytes = arch.hidden_size * models::dtype_bytes(arch.dtype) / in.tp;
  std::vector<int> chunks(static_cast<std::size_t>(arch.num_layers), 1);
  const double bw = in.cluster.bandwidth_between(0, std::min(1, in.cluster.total_gpus() - 1)) *
                    in.profile.nvlink.bandwidth_efficiency;
  for (std::size_t li = 0; li < L; ++li) {
    // Tokens per (rank, expert) and bytes each rank sends.
    std::vector<std::vector<long>> per_expert(static_cast<std::size_t>(in.ep), std::vector<long>(static_cast<std::size_t>(arch.num_experts), 0));
    std::vector<double> out_bytes(static_cast<std::size_t>(in.ep), 0.0);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const int h = batch.home[i];
      std::vector<int> dests;
      for (int j = 0; j < k; ++j) {
        const int e = batch.experts[(i * L + li) * static_cast<std::size_t>(k) + static_cast<std::size_t>(j)];
        const auto& holders = in.placement.ranks[li][static_cast<std::size_t>(e)];
        const int r = std::find(holders.begin(), holders.end(), h) != holders.end() ? h : holders[batch.token_index[i] % holders.size()];
        ++per_expert[static_cast<std::size_t>(r)][static_cast<std::size_t>(e)];
        if (r != h && std::find(dests.begin(), dests.end(), r) == dests.end()) dests.push_back(r);
      }
      out_bytes[static_cast<std::size_t>(h)] += static_cast<double>(dests.size()) * token_bytes;
    }
    nlohmann::json cand = nlohmann::json::object();
    double best = std::numeric_limits<double>::infinity();
    int best_n = 1;
    for (int n : {1, 2, 4}) {
      double worst = 0.0;
      for (int r = 0; r < in.ep; ++r) {
        std::vector<long> chunk_tokens;
        for (long t : per_expert[static_cast<std::size_t>(r)])
          if (t > 0) chunk_tokens.push_back(std::max<long>(1, (t + n - 1) / n));
        const auto work = models::grouped_expert_time(in.profile, arch, chunk_tokens, in.tp);
        const double comm = out_bytes[static_cast<std::size_t>(r)] / n / bw + in.cluster.latency_between(0, 1);
        const auto slow = n > 1 ? models::contention(in.profile, "all_to_all", out_bytes[static_cast<std::size_t>(r)] / n, work.flops)
                                : models::Slowdown{};
        // Pipeline: dispatch chunks back to back; compute chunk i after dispatch i; combine i after
        // compute i, on the same stream as the dispatches.
        double comm_free = 0.0, compute_free = 0.0, end = 0.0;
        std::vector<double> dispatched(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i) {
          comm_free += comm * (n > 1 && i > 0 ? slow.comm : 1.0);
          dispatched[static_cast<std::size_t>(i)] = comm_free;
        }
        for (int i = 0; i < n; ++i) {
          const double start = std::max(compute_free, dispatched[static_cast<std::size_t>(i)]);
          const bool overlapped = n > 1 && (i + 1 < n || i > 0);
          compute_free = start + work.time * (overlapped ? slow.compute : 1.0);
          comm_free = std::max(comm_free, compute_free) + comm * (n > 1 && i + 1 < n ? slow.comm : 1.0);
          end = comm_free;
        }
        worst = std::max(worst, end);
      }
      cand[std::to_string(n)] = worst;
      if (worst < best * (1.0 - 1e-9)) {
        best = worst;
        best_n = n;
      }
    }
    chunks[static_cast<std::size_t>(arch.moe_layers[li])] = best_n;
    decisions.push_back({{"layer", arch.moe_layers[li]},
                         {"chosen", best_n == 1 ? "sequential" : "overlapped-" + std::to_string(best_n)},
                         {"estimated_s", cand},
                         {"why", best_n == 1 ? "overlap does not pay: contention and per-chunk launch floors outweigh the hidden communication"
                                             : "the hidden all-to-all outweighs the contention slowdown and the chunking cost"}});
  }
  return chunks;
}

// The simulation of one timeline, to run in a child process (captures by value).
// `ahead` is read when the job runs (it is set once every job is known).
std::function<SimResult()> timeline_job(const Scenario& s, const Inputs& in, std::vector<int> chunks, bool contention,
                                        std::string label, StepRange range, const bool& ahead, std::string dump = {}) {
  return [&s, &in, chunks = std::move(chunks), contention, label = std::move(label), range, &ahead, dump = std::move(dump)]() {
    std::unique_ptr<traces::TraceReader> reader;
    std::unique_ptr<StepSource> source;
    if (needs_trace(s, in.arch)) {
      reader = traces::open_trace(s.trace);
      source = make_source(s, *reader, in.ep);
    }
    SimInput si;
    si.arch = &in.arch;
    si.cluster = &in.cluster;
    si.profile = &in.profile;
    si.placement = in.has_placement ? &in.placement : nullptr;
    si.tp = in.tp;
    si.ep = in.ep;
    si.workload = &s.workload;
    si.steps = source.get();
    si.options.layer_chunks = chunks;
    si.options.contention = contention;
    si.options.dispatch = s.dispatch;
    si.options.power_cap = s.power_cap;
    si.options.clock_limit = s.clock_limit;
    si.options.steps = s.workload.steps;
    si.options.warmup_steps = s.workload.warmup_steps;
    si.options.timeline_steps = 3;
    si.options.simgrid_cfg = s.simgrid_cfg;
    si.options.label = label;
    si.options.dump_activities = dump;
    si.options.first_step = range.first;
    si.options.end_step = range.end;
    si.options.build_ahead = ahead;
    return simulate(si);
  };
}

double mean_over_moe(const SimResult& r, double LayerResult::*field) {
  double sum = 0;
  int n = 0;
  for (const auto& l : r.layers)
    if (l.moe) {
      sum += l.*field;
      ++n;
    }
  return n ? sum / n : 0.0;
}

std::string num(double v) {
  if (std::isnan(v)) return "";
  std::ostringstream ss;
  ss << std::setprecision(17) << v;
  return ss.str();
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string placement_label(const Scenario& s) {
  return s.placement.file.empty() ? s.placement.policy : fs::path(s.placement.file).filename().string();
}

}  // namespace

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n >= 1) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int parallel_jobs() {
  if (const char* env = std::getenv("MOESIM_JOBS"); env && *env) {
    const int n = std::atoi(env);
    if (n >= 1) return n;
  }
  return usable_cpus();
}

bool build_ahead(int processes) {
  if (const char* env = std::getenv("MOESIM_BUILD_AHEAD"); env && *env) return std::string_view(env) != "0";
  return std::max(1, processes) * 2 <= usable_cpus();
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

VariantResult run_variant(const Variant& variant, const std::function<void(const std::string&)>& progress,
                          const RunOptions& options) {
  const Scenario& s = variant.scenario;
  VariantResult out;
  out.name = variant.name;
  out.scenario = s;
  out.assignments = variant.assignments;
  Inputs in = load_inputs(s, options);
  out.profile_name = in.profile.name;
  out.placement_file = in.placement_file;
  out.placement_solved = in.placement_solved;
  out.profile_sources = in.profile.source_kinds();
  out.placement_policy = in.has_placement ? in.placement.policy : "";
  out.placement_report = in.has_placement ? in.placement.report : nlohmann::json::object();
  // Content hashes, not paths: results do not depend on where the inputs sit.
  out.inputs = {{"architecture_sha256", common::sha256_file(in.arch.source_file)},
                {"cluster_sha256", common::sha256_file(in.cluster.source_file)},
                {"profile_sha256", common::sha256_file(in.profile.source_file)}};
  if (!s.placement.file.empty()) out.inputs["placement_sha256"] = common::sha256_file(s.placement.file);
  if (!in.placement_file.empty()) out.inputs["placement_sha256"] = common::sha256_file(in.placement_file);

  const int n_layers = s.workload.mode == WorkloadMode::kSynthetic ? s.workload.synthetic_layers : in.arch.num_layers;
  const int N = std::max(1, s.overlap.chunks);
  const std::vector<int> one(static_cast<std::size_t>(n_layers), 1), many(static_cast<std::size_t>(n_layers), N);
  const OverlapPolicy req = s.overlap.policy;
  std::vector<int> requested_chunks = req == OverlapPolicy::kSequential ? one : many;
  if (req == OverlapPolicy::kAuto) {
    if (s.workload.mode == WorkloadMode::kSynthetic || s.workload.mode == WorkloadMode::kTraining)
      throw common::InputError("overlap.policy auto chooses per MoE layer for prefill and decode; use sequential, overlapped or ideal for " +
                               workload_mode_name(s.workload.mode));
    requested_chunks = choose_auto_chunks(s, in, out.auto_decisions);
  }
  out.layer_chunks = requested_chunks;
  // Every timeline in step ranges, one process each, all run in parallel (docs/simulator.md, "Steps
  // in parallel"); a run that dumps its activities keeps the requested timeline in one engine.
  std::vector<std::function<SimResult()>> jobs;
  std::vector<std::string> labels;
  std::vector<std::size_t> first_job;  // per timeline: its first job; its ranges follow
  const std::vector<StepRange> ranges = step_ranges(s.workload.warmup_steps, s.workload.steps);
  bool ahead = false;  // set below, once the number of processes is known
  auto add = [&](const std::vector<int>& chunks, bool contention, const std::string& label) {
    first_job.push_back(jobs.size());
    if (labels.empty() && !options.dump_activities.empty()) {
      jobs.push_back(timeline_job(s, in, chunks, contention, label, StepRange{0, -1}, ahead, options.dump_activities));
    } else {
      for (const auto& r : ranges) jobs.push_back(timeline_job(s, in, chunks, contention, label, r, ahead));
    }
    labels.push_back(label);
  };
  add(requested_chunks, req != OverlapPolicy::kIdeal, overlap_policy_name(req));
  if (s.overlap.timelines == Timelines::kAll) {
    if (req != OverlapPolicy::kSequential) add(one, true, "sequential");
    if (req != OverlapPolicy::kOverlapped) add(many, true, "overlapped");
    if (req != OverlapPolicy::kIdeal) add(many, false, "ideal");
    add(one, false, "ideal-1-chunk");
  }
  // The trace's hash goes into the results only: computed here while the children simulate.
  const bool hash_trace = needs_trace(s, in.arch);
  const int processes = std::min(parallel_jobs(), static_cast<int>(jobs.size()));
  ahead = build_ahead(processes);
  const std::vector<SimResult> parts = run_isolated_all(jobs, processes, [&] {
    if (hash_trace && in.trace_sha256.empty()) in.trace_sha256 = cached_sha256(s.trace);
  });
  if (!s.trace.empty()) out.inputs["trace_sha256"] = in.trace_sha256;
  first_job.push_back(jobs.size());
  for (std::size_t t = 0; t + 1 < first_job.size(); ++t)
    out.timelines.push_back(merge_step_ranges(std::vector<SimResult>(parts.begin() + static_cast<std::ptrdiff_t>(first_job[t]),
                                                                     parts.begin() + static_cast<std::ptrdiff_t>(first_job[t + 1]))));
  if (progress)
    for (const auto& l : labels) progress(variant.name + ": " + l);

  const SimResult& r = out.timelines.front();
  auto& sum = out.summary;
  sum.p50 = percentile(r.step_latency, 0.5);
  sum.p90 = percentile(r.step_latency, 0.9);
  sum.p99 = percentile(r.step_latency, 0.99);
  sum.max = r.step_latency.empty() ? kNaN : *std::max_element(r.step_latency.begin(), r.step_latency.end());
  sum.mean = r.step_latency.empty() ? kNaN : r.measured_time / static_cast<double>(r.step_latency.size());
  sum.throughput = r.measured_time > 0 ? static_cast<double>(r.tokens) / r.measured_time : 0.0;
  sum.token_tail = mean_over_moe(r, &LayerResult::token_tail);
  sum.a2a_tail = mean_over_moe(r, &LayerResult::a2a_tail);
  sum.a2a_avg = mean_over_moe(r, &LayerResult::a2a_avg);
  double energy = 0, peak = 0, busy = 0;
  for (const auto& g : r.gpus) {
    energy += g.energy;
    peak = std::max(peak, g.peak_power);
    busy += g.compute_busy;
  }
  const double G = std::max<double>(1.0, static_cast<double>(r.gpus.size()));
  sum.energy_per_step = r.step_latency.empty() ? 0.0 : energy / static_cast<double>(r.step_latency.size());
  sum.energy_per_token = r.tokens ? energy / static_cast<double>(r.tokens) : kNaN;
  sum.avg_power = r.measured_time > 0 ? energy / r.measured_time / G : 0.0;
  sum.peak_power = peak;
  sum.utilisation = r.measured_time > 0 ? busy / r.measured_time / G : 0.0;
  sum.compute_slowdown = r.compute_alone > 0 ? r.compute_actual / r.compute_alone - 1.0 : 0.0;
  auto p50_of = [&](const std::string& label) {
    for (const auto& t : out.timelines)
      if (t.label == label) return percentile(t.step_latency, 0.5);
    return kNaN;
  };
  auto time_of = [&](const std::string& label) {
    for (const auto& t : out.timelines)
      if (t.label == label) return t.measured_time;
    return kNaN;
  };
  sum.sequential_p50 = p50_of("sequential");
  sum.overlapped_p50 = p50_of("overlapped");
  sum.ideal_p50 = p50_of("ideal");
  // Chunks exist only in the MoE all-to-all of inference steps.
  const bool chunked = s.workload.mode == WorkloadMode::kPrefill || s.workload.mode == WorkloadMode::kDecode;
  sum.chunking_cost = chunked ? time_of("ideal") / time_of("ideal-1-chunk") - 1.0 : kNaN;
  return out;
}

nlohmann::json context_block(const Study& study) {
  return {{"tool", "moesim"},
          {"version", common::kVersion},
          {"git_revision", common::kGitRevision},
          {"build_type", common::kBuildType},
          {"simgrid_version", std::to_string(SIMGRID_VERSION_MAJOR) + "." + std::to_string(SIMGRID_VERSION_MINOR)},
          {"study", study.name},
          {"study_sha256", study.sha256},
          {"description", study.description}};
}

std::string scenario_yaml(const Scenario& s) {
  std::ostringstream y;
  y << "# The resolved scenario this variant ran (every default filled in).\n";
  y << "architecture: " << s.architecture << "\ncluster: " << s.cluster << "\nprofile: " << (s.profile.empty() ? "(cluster GPU kind)" : s.profile)
    << "\ntrace: " << (s.trace.empty() ? "none" : s.trace) << "\nparallelism: {tp: " << s.tp << ", ep: " << s.ep << "}\n";
  const auto& w = s.workload;
  y << "workload:\n  mode: " << workload_mode_name(w.mode) << "\n  steps: " << w.steps << "\n  warmup_steps: " << w.warmup_steps
    << "\n  tokens_per_step: " << w.tokens_per_step << "\n  batch_sequences: " << w.batch_sequences << "\n";
  y << "placement: {policy: " << s.placement.policy << ", file: " << (s.placement.file.empty() ? "none" : s.placement.file)
    << ", replicas: " << s.placement.replicas << ", groups: " << s.placement.groups << "}\n";
  y << "overlap: {policy: " << overlap_policy_name(s.overlap.policy) << ", chunks: " << s.overlap.chunks
    << ", timelines: " << (s.overlap.timelines == Timelines::kAll ? "all" : "requested") << "}\n";
  y << "dispatch: {mode: " << dispatch_mode_name(s.dispatch) << "}\npower_cap: " << (s.power_cap > 0 ? num(s.power_cap) + "W" : "none")
    << "\nclock_limit: " << (s.clock_limit > 0 ? num(s.clock_limit / 1e6) + "MHz" : "none")
    << "\nseed: " << s.seed << "\n";
  y << "simgrid: [";
  for (std::size_t i = 0; i < s.simgrid_cfg.size(); ++i) y << (i ? ", " : "") << '"' << s.simgrid_cfg[i] << '"';
  y << "]\n";
  return y.str();
}

nlohmann::json variant_json(const VariantResult& v, bool with_details) {
  const auto& s = v.summary;
  auto jnum = [](double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); };
  nlohmann::json assignments = nlohmann::json::object();
  for (const auto& [k, val] : v.assignments) assignments[k] = val;
  nlohmann::json j = {
      {"name", v.name},
      {"assignments", assignments},
      {"inputs",
       {{"architecture", v.scenario.architecture},
        {"cluster", v.scenario.cluster},
        {"profile", v.profile_name},
        {"profile_sources", v.profile_sources},
        {"tp", v.scenario.tp},
        {"ep", v.scenario.ep},
        {"mode", workload_mode_name(v.scenario.workload.mode)},
        {"placement", placement_label(v.scenario)},
        {"overlap", overlap_policy_name(v.scenario.overlap.policy)},
        {"chunks", v.scenario.overlap.chunks},
        {"dispatch", dispatch_mode_name(v.scenario.dispatch)},
        {"power_cap_W", v.scenario.power_cap > 0 ? nlohmann::json(v.scenario.power_cap) : nlohmann::json(nullptr)},
        {"steps", v.scenario.workload.steps},
        {"hashes", v.inputs}}},
      {"source", "predicted by the moesim simulator (model) from profile " + v.profile_name + " (" +
                     [&] {
                       std::string k;
                       for (const auto& x : v.profile_sources) k += (k.empty() ? "" : ", ") + x;
                       return k;
                     }() +
                     " values)"},
      {"step_latency_s", {{"p50", jnum(s.p50)}, {"p90", jnum(s.p90)}, {"p99", jnum(s.p99)}, {"max", jnum(s.max)}, {"mean", jnum(s.mean)}}},
      {"throughput_tokens_per_s", s.throughput},
      {"token_tail_s", s.token_tail},
      {"a2a_tail_s", s.a2a_tail},
      {"a2a_avg_s", s.a2a_avg},
      {"energy_per_step_J", s.energy_per_step},
      {"energy_per_token_J", jnum(s.energy_per_token)},
      {"avg_power_W", s.avg_power},
      {"peak_power_W", s.peak_power},
      {"utilisation", s.utilisation},
      {"compute_slowdown", s.compute_slowdown},
      {"chunking_cost", jnum(s.chunking_cost)},
      {"timelines_p50_s", {{"sequential", jnum(s.sequential_p50)}, {"overlapped", jnum(s.overlapped_p50)}, {"ideal", jnum(s.ideal_p50)}}},
      {"trace_repeated", v.timelines.front().trace_repeated},
      {"dispatch_mode_ran", dispatch_mode_name(v.scenario.dispatch)},
  };
  if (!v.placement_file.empty()) j["inputs"]["placement_file"] = v.placement_file;
  if (!v.auto_decisions.empty()) j["auto_decisions"] = v.auto_decisions;
  if (with_details) {
    j["placement_policy"] = v.placement_policy;
    j["placement_report"] = v.placement_report;
    j["layer_chunks"] = v.layer_chunks;
    nlohmann::json tl = nlohmann::json::array();
    for (const auto& t : v.timelines) {
      auto x = to_json(t);
      x.erase("wall_s");
      x["compute_slowdown"] = t.compute_alone > 0 ? t.compute_actual / t.compute_alone - 1.0 : 0.0;
      x["step_p50_s"] = jnum(percentile(t.step_latency, 0.5));
      x["step_p99_s"] = jnum(percentile(t.step_latency, 0.99));
      tl.push_back(std::move(x));
    }
    j["timelines"] = tl;
  }
  return j;
}

VariantResult variant_result_from_json(const nlohmann::json& j, const std::string& where) {
  auto fail = [&](const std::string& what) -> void {
    throw common::InputError(where + ": " + what + "; it was not written by this version of moesim, or was edited: " +
                             "delete its variant folder and run again (--resume reruns it)");
  };
  auto at = [&](const nlohmann::json& obj, const std::string& key, const std::string& path) -> const nlohmann::json& {
    if (!obj.is_object() || !obj.contains(key)) fail("expected the key " + path + key + ", found none");
    return obj.at(key);
  };
  // Written by jnum: null stands for NaN (not run, or undefined).
  auto number = [&](const nlohmann::json& obj, const std::string& key, const std::string& path) {
    const auto& x = at(obj, key, path);
    if (x.is_null()) return kNaN;
    if (!x.is_number()) fail("expected a number at " + path + key + ", found " + x.dump());
    return x.get<double>();
  };
  auto text = [&](const nlohmann::json& obj, const std::string& key, const std::string& path) {
    const auto& x = at(obj, key, path);
    if (!x.is_string()) fail("expected a string at " + path + key + ", found " + x.dump());
    return x.get<std::string>();
  };
  auto integer = [&](const nlohmann::json& obj, const std::string& key, const std::string& path) {
    const auto& x = at(obj, key, path);
    if (!x.is_number_integer()) fail("expected an integer at " + path + key + ", found " + x.dump());
    return x.get<int>();
  };
  auto enum_of = [&](const std::string& value, const std::string& path, auto name_of, auto... values) {
    for (auto v : {values...})
      if (name_of(v) == value) return v;
    fail("unexpected value \"" + value + "\" at " + path);
    return std::get<0>(std::make_tuple(values...));
  };

  VariantResult v;
  v.name = text(j, "name", "variant.");
  const auto& assignments = at(j, "assignments", "variant.");
  if (!assignments.is_object()) fail("expected an object at variant.assignments");
  for (const auto& [k, val] : assignments.items()) {
    if (!val.is_string()) fail("expected a string at variant.assignments." + k);
    v.assignments.emplace_back(k, val.get<std::string>());
  }
  const auto& in = at(j, "inputs", "variant.");
  const std::string ip = "variant.inputs.";
  Scenario& s = v.scenario;
  s.architecture = text(in, "architecture", ip);
  s.cluster = text(in, "cluster", ip);
  v.profile_name = text(in, "profile", ip);
  for (const auto& k : at(in, "profile_sources", ip)) {
    if (!k.is_string()) fail("expected strings at " + ip + "profile_sources");
    v.profile_sources.push_back(k.get<std::string>());
  }
  s.tp = integer(in, "tp", ip);
  s.ep = integer(in, "ep", ip);
  s.workload.mode = enum_of(text(in, "mode", ip), ip + "mode", workload_mode_name, WorkloadMode::kPrefill,
                            WorkloadMode::kDecode, WorkloadMode::kTraining, WorkloadMode::kSynthetic);
  // The label the tables print (a policy, or a placement file's name).
  s.placement.policy = text(in, "placement", ip);
  s.overlap.policy = enum_of(text(in, "overlap", ip), ip + "overlap", overlap_policy_name, OverlapPolicy::kSequential,
                             OverlapPolicy::kOverlapped, OverlapPolicy::kIdeal, OverlapPolicy::kAuto);
  s.overlap.chunks = integer(in, "chunks", ip);
  s.dispatch = enum_of(text(in, "dispatch", ip), ip + "dispatch", dispatch_mode_name, DispatchMode::kFlat,
                       DispatchMode::kHierarchical);
  const double cap = number(in, "power_cap_W", ip);
  s.power_cap = std::isnan(cap) ? 0.0 : cap;
  s.workload.steps = integer(in, "steps", ip);
  v.inputs = at(in, "hashes", ip);
  if (in.contains("placement_file")) v.placement_file = text(in, "placement_file", ip);
  if (j.contains("auto_decisions")) v.auto_decisions = j.at("auto_decisions");

  auto& sum = v.summary;
  const auto& lat = at(j, "step_latency_s", "variant.");
  const std::string lp = "variant.step_latency_s.";
  sum.p50 = number(lat, "p50", lp);
  sum.p90 = number(lat, "p90", lp);
  sum.p99 = number(lat, "p99", lp);
  sum.max = number(lat, "max", lp);
  sum.mean = number(lat, "mean", lp);
  sum.throughput = number(j, "throughput_tokens_per_s", "variant.");
  sum.token_tail = number(j, "token_tail_s", "variant.");
  sum.a2a_tail = number(j, "a2a_tail_s", "variant.");
  sum.a2a_avg = number(j, "a2a_avg_s", "variant.");
  sum.energy_per_step = number(j, "energy_per_step_J", "variant.");
  sum.energy_per_token = number(j, "energy_per_token_J", "variant.");
  sum.avg_power = number(j, "avg_power_W", "variant.");
  sum.peak_power = number(j, "peak_power_W", "variant.");
  sum.utilisation = number(j, "utilisation", "variant.");
  sum.compute_slowdown = number(j, "compute_slowdown", "variant.");
  sum.chunking_cost = number(j, "chunking_cost", "variant.");
  const auto& tl = at(j, "timelines_p50_s", "variant.");
  sum.sequential_p50 = number(tl, "sequential", "variant.timelines_p50_s.");
  sum.overlapped_p50 = number(tl, "overlapped", "variant.timelines_p50_s.");
  sum.ideal_p50 = number(tl, "ideal", "variant.timelines_p50_s.");
  const auto& repeated = at(j, "trace_repeated", "variant.");
  if (!repeated.is_boolean()) fail("expected true or false at variant.trace_repeated");
  SimResult first;
  first.label = overlap_policy_name(s.overlap.policy);
  first.trace_repeated = repeated.get<bool>();
  v.timelines.push_back(std::move(first));
  return v;
}

std::string results_csv(const std::vector<VariantResult>& results, const std::string& baseline) {
  std::ostringstream out;
  out << "variant,baseline,architecture,cluster,profile,profile_sources,tp,ep,mode,placement,overlap,chunks,dispatch,"
         "power_cap_W,steps,step_p50_s,step_p90_s,step_p99_s,step_max_s,throughput_tokens_per_s,token_tail_s,a2a_tail_s,"
         "a2a_avg_s,energy_per_step_J,energy_per_token_J,avg_power_W,peak_power_W,utilisation,compute_slowdown,"
         "sequential_p50_s,overlapped_p50_s,ideal_p50_s,chunking_cost,p50_change_vs_baseline,p99_change_vs_baseline\n";
  const VariantResult* base = nullptr;
  for (const auto& r : results)
    if (r.name == baseline) base = &r;
  for (const auto& r : results) {
    const auto& s = r.summary;
    std::string kinds;
    for (const auto& k : r.profile_sources) kinds += (kinds.empty() ? "" : "+") + k;
    out << csv_field(r.name) << "," << (r.name == baseline ? "yes" : "no") << "," << csv_field(r.scenario.architecture) << ","
        << csv_field(r.scenario.cluster) << "," << csv_field(r.profile_name) << "," << kinds << "," << r.scenario.tp << ","
        << r.scenario.ep << "," << workload_mode_name(r.scenario.workload.mode) << "," << csv_field(placement_label(r.scenario)) << ","
        << overlap_policy_name(r.scenario.overlap.policy) << "," << r.scenario.overlap.chunks << ","
        << dispatch_mode_name(r.scenario.dispatch) << "," << (r.scenario.power_cap > 0 ? num(r.scenario.power_cap) : "") << ","
        << r.scenario.workload.steps << "," << num(s.p50) << "," << num(s.p90) << "," << num(s.p99) << "," << num(s.max) << ","
        << num(s.throughput) << "," << num(s.token_tail) << "," << num(s.a2a_tail) << "," << num(s.a2a_avg) << ","
        << num(s.energy_per_step) << "," << num(s.energy_per_token) << "," << num(s.avg_power) << "," << num(s.peak_power) << ","
        << num(s.utilisation) << "," << num(s.compute_slowdown) << "," << num(s.sequential_p50) << "," << num(s.overlapped_p50)
        << "," << num(s.ideal_p50) << "," << num(s.chunking_cost) << ","
        << (base ? num(s.p50 / base->summary.p50 - 1.0) : "") << "," << (base ? num(s.p99 / base->summary.p99 - 1.0) : "") << "\n";
  }
  return out.str();
}

std::string results_table(const std::vector<VariantResult>& results, const std::string& baseline) {
  std::ostringstream out;
  const VariantResult* base = nullptr;
  for (const auto& r : results)
    if (r.name == baseline) base = &r;
  if (!results.empty()) {
    const auto& r = results.front();
    std::string kinds;
    for (const auto& k : r.profile_sources) kinds += (kinds.empty() ? "" : " + ") + k;
    out << "Predicted by the simulator (model) with profile " << r.profile_name << " (" << kinds << " values); "
        << r.scenario.workload.steps << " measured steps per variant.\n";
  }
  char line[512];
  std::snprintf(line, sizeof line, "%-30s %10s %10s %10s %11s %11s %10s %9s %9s %8s\n", "variant", "p50 ms", "p99 ms",
                "tok/s", "a2a tail", "tok tail", "mJ/token", "avg W", "slowdown", "vs base");
  out << line;
  std::snprintf(line, sizeof line, "%-30s %10s %10s %10s %11s %11s %10s %9s %9s %8s\n", "", "", "", "", "ms/layer",
                "ms/layer", "", "per GPU", "compute", "p99");
  out << line;
  for (const auto& r : results) {
    const auto& s = r.summary;
    const std::string delta = base ? (std::ostringstream() << std::showpos << std::fixed << std::setprecision(1)
                                                           << 100.0 * (s.p99 / base->summary.p99 - 1.0) << "%")
                                         .str()
                                   : "";
    std::snprintf(line, sizeof line, "%-30s %10.3f %10.3f %10.0f %11.4f %11.4f %10.3f %9.0f %8.1f%% %8s\n",
                  (r.name + (r.name == baseline ? " *" : "")).c_str(), s.p50 * 1e3, s.p99 * 1e3, s.throughput,
                  s.a2a_tail * 1e3, s.token_tail * 1e3, s.energy_per_token * 1e3, s.avg_power, 100.0 * s.compute_slowdown,
                  r.name == baseline ? "base" : delta.c_str());
    out << line;
  }
  out << "(* baseline; a2a and token tails: mean over MoE layers of the slowest GPU per layer)\n";
  return out.str();
}

void write_variant_files(const std::string& vdir, const nlohmann::json& context, const VariantResult& r) {
  const fs::path dir(vdir);
  const SimResult& t = r.timelines.front();
  common::write_file_atomic(dir / "timeline.json", chrome_trace_json(t.timeline, t.gpus.size()), true);
  common::write_file_atomic(dir / "scenario.yaml", scenario_yaml(r.scenario), true);
  const nlohmann::json v = {{"schema_version", 1}, {"context", context}, {"variant", variant_json(r, true)}};
  common::write_file_atomic(dir / "result.json", v.dump(2) + "\n", true);
}

void write_results(const std::string& dir, const Study& study, const std::vector<VariantResult>& results,
                   const nlohmann::json& run_info) {
  const fs::path root(dir);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : results) rows.push_back(variant_json(r, false));
  nlohmann::json doc = {{"schema_version", 1},
                        {"context", context_block(study)},
                        {"baseline", study.baseline},
                        {"variants", rows},
                        {"run_info", run_info}};
  for (const auto& r : results) {
    const fs::path vdir = root / "variants" / r.name;
    fs::create_directories(vdir);
    write_variant_files(vdir.string(), context_block(study), r);
  }
  common::write_file_atomic(root / "results.csv", results_csv(results, study.baseline), true);
  common::write_file_atomic(root / "results.json", doc.dump(2) + "\n", true);
}

}  // namespace moesim::sim
