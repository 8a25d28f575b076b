#include "sim/cli/place_cmd.hpp"

#include <cmath>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/hash.hpp"
#include "common/strings.hpp"
#include "common/units.hpp"
#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "sim/placement/evaluate.hpp"
#include "sim/placement/export.hpp"
#include "sim/study/placement_sim.hpp"
#include "sim/placement/placement.hpp"
#include "sim/placement/policy.hpp"
#include "sim/placement/robust.hpp"
#include "sim/placement/routing_counts.hpp"
#include "traces/load_trace.hpp"
#include "traces/trace.hpp"

namespace moesim::cli {

namespace fs = std::filesystem;

namespace {

int parse_int_option(const po::variables_map& vm, const std::string& name, int lo, int hi, int fallback) {
  if (!vm.count(name)) return fallback;
  const std::string text = vm[name].as<std::string>();
  std::size_t used = 0;
  long v = 0;
  try {
    v = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || v < lo || v > hi)
    throw common::UsageError("--" + name + ": expected an integer " + std::to_string(lo) + ".." + std::to_string(hi) +
                             ", got " + common::quoted(text));
  return static_cast<int>(v);
}

// --dispatch flat|residence (default flat): whether the placement serves residence dispatch
// (sim/placement/routing_rule.hpp), where a token's next MoE layer starts from its owner rank.
bool parse_residence(const po::variables_map& vm) {
  if (!vm.count("dispatch")) return false;
  const std::string text = vm["dispatch"].as<std::string>();
  if (text == "flat" || text == "residence") return text == "residence";
  throw common::UsageError("--dispatch: expected flat or residence, got " + common::quoted(text));
}

std::string policy_list(const sim::PlacementRegistry& registry) {
  std::ostringstream out;
  for (const auto& n : registry.names())
    out << "  " << n << std::string(n.size() < 16 ? 16 - n.size() : 1, ' ') << registry.summary(n) << "\n";
  return out.str();
}

// --weight, one per --trace (or none: equal weights), each positive and finite.
std::vector<double> parse_weights(const po::variables_map& vm, std::size_t traces) {
  if (!vm.count("weight")) return std::vector<double>(traces, 1.0);
  const auto texts = vm["weight"].as<std::vector<std::string>>();
  if (texts.size() != traces)
    throw common::UsageError("--weight: given " + std::to_string(texts.size()) + " times for " +
                             std::to_string(traces) + " --trace; give one --weight per --trace (in the same order), " +
                             "or none for equal weights");
  std::vector<double> weights;
  for (const std::string& text : texts) {
    std::size_t used = 0;
    double w = 0.0;
    try {
      w = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (text.empty() || used != text.size() || !std::isfinite(w) || w <= 0.0)
      throw common::UsageError("--weight: expected a positive finite number such as 0.5 or 3, got " +
                               common::quoted(text));
    weights.push_back(w);
  }
  return weights;
}

// A trace's routing shape, and its routing counts when `count` (a per-token trace, or a load-only
// count trace: its summed loads, no layer pairs).
traces::TraceShape shape_and_counts(const std::string& file, bool count, sim::RoutingCounts& counts,
                                    const std::string& sha256) {
  if (traces::is_load_trace(file)) {
    auto reader = traces::open_load_trace(file);
    if (count) counts = sim::count_load_routing(*reader, sha256);
    return reader->meta().shape;
  }
  auto reader = traces::open_trace(file);
  if (count) counts = sim::count_routing(*reader, sha256);
  return reader->meta().shape;
}

// The traces of a robust placement, each checked against the architecture (the error names the file);
// routing is counted only for a policy that reads it.
std::vector<sim::RobustTrace> robust_traces(const std::vector<std::string>& files, const std::vector<double>& weights,
                                            const models::Architecture& arch, bool needs_routing) {
  std::vector<sim::RobustTrace> traces;
  for (std::size_t i = 0; i < files.size(); ++i) {
    sim::RobustTrace t;
    t.path = files[i];
    t.sha256 = common::sha256_file(files[i]);
    t.weight = weights[i];
    const traces::TraceShape shape = shape_and_counts(files[i], false, t.counts, t.sha256);
    if (const std::string mismatch = models::trace_shape_mismatch(shape, arch); !mismatch.empty())
      throw common::InputError(files[i] + ": " + mismatch + " (--architecture " + arch.name + ")");
    if (needs_routing) {
      shape_and_counts(files[i], true, t.counts, t.sha256);
      if (t.counts.tokens == 0) throw common::InputError(files[i] + ": the trace has no tokens to profile");
    }
    traces.push_back(std::move(t));
  }
  return traces;
}

// The objective, the candidates' scores on every trace, and the one chosen (report["robust"]).
void print_robust(std::ostream& out, const nlohmann::json& robust) {
  const auto& traces = robust["traces"];
  const auto& candidates = robust["candidates"];
  const std::size_t chosen = robust["chosen"].get<std::size_t>();
  std::ostringstream weights;
  weights << std::setprecision(4);
  for (const auto& t : traces) weights << " " << t["weight"].get<double>();
  out << "  objective " << robust["objective"].get<std::string>() << " over " << traces.size() << " traces (weights"
      << weights.str() << "); score: " << robust["score"].get<std::string>() << "\n";
  std::size_t width = 12;
  for (const auto& c : candidates) width = std::max(width, c["solved_on"].get<std::string>().size() + 2);
  auto pad = [](const std::string& text, std::size_t w) {
    return text.size() >= w ? text + " " : text + std::string(w - text.size(), ' ');
  };
  std::ostringstream head;
  head << "    " << pad("solved on", width);
  for (std::size_t i = 0; i < traces.size(); ++i) head << pad("trace " + std::to_string(i), 10);
  out << head.str() << "worst\n";
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    std::ostringstream row;
    row << std::fixed << std::setprecision(4);
    row << "    " << pad(candidates[c]["solved_on"].get<std::string>(), width);
    for (const auto& v : candidates[c]["scores"]) {
      std::ostringstream cell;
      cell << std::fixed << std::setprecision(4) << v.get<double>();
      row << pad(cell.str(), 10);
    }
    row << candidates[c]["worst"].get<double>() << (c == chosen ? "  <- chosen" : "");
    out << row.str() << "\n";
  }
  for (std::size_t i = 0; i < traces.size(); ++i)
    out << "    trace " << i << ": " << traces[i]["file"].get<std::string>() << ", "
        << traces[i]["tokens"].get<std::uint64_t>() << " tokens\n";
  if (robust.contains("note")) out << "  note: " << robust["note"].get<std::string>() << "\n";
}

void print_report(std::ostream& out, const sim::Placement& p) {
  for (const char* stage : {"stage1", "stage2"}) {
    if (!p.report.contains(stage)) continue;
    const auto& s = p.report[stage];
    out << "  " << stage << ": " << s.value("status", "?") << ", objective " << std::setprecision(6)
        << s.value("objective", 0.0) << ", bound " << s.value("bound", 0.0) << ", gap " << std::fixed
        << std::setprecision(2) << 100.0 * s.value("gap", 0.0) << "%, " << std::setprecision(2)
        << s.value("seconds", 0.0) << " s, " << s.value("parts_optimal", 0) << "/" << s.value("parts", 0)
        << " parts proven optimal" << std::defaultfloat << "\n";
  }
  if (p.report.contains("contiguous_objective"))  // exflow
    out << "  exflow: " << p.report.value("status", "?") << ", objective " << std::setprecision(6)
        << p.report.value("objective", 0.0) << " s (contiguous " << p.report.value("contiguous_objective", 0.0)
        << " s), " << p.report.value("sweeps", 0) << " sweeps, " << std::fixed << std::setprecision(2)
        << p.report.value("seconds", 0.0) << " s" << std::defaultfloat << "\n";
}

int run_place(const Args& args, Context& ctx) {
  po::options_description opts("Options");
  opts.add_options()("trace", po::value<std::vector<std::string>>(),
                     "routing trace to profile (policies that use routing); repeat it for one placement over "
                     "several traces")("weight", po::value<std::vector<std::string>>(),
                                       "with several --trace: each trace's weight, one per --trace (default equal)")(
      "objective", po::value<std::string>(),
      "with several --trace: expected (solve on the weighted mix, the default) or worst (minimax over candidates)")(
      "architecture", po::value<std::string>()->required(), "architecture name or YAML path")(
      "cluster", po::value<std::string>()->required(), "cluster name or YAML path")(
      "policy", po::value<std::string>()->required(), "placement policy (see the list above)")(
      "tp", po::value<std::string>(), "GPUs per EP rank (default 1)")("ep", po::value<std::string>(),
                                                                      "EP ranks (default GPUs / TP)")(
      "replicas", po::value<std::string>(), "eplb, moetuner_replicated: redundant expert slots per layer (default 0)")(
      "groups", po::value<std::string>(), "eplb: expert groups (default the architecture's routing groups)")(
      "seed", po::value<std::string>(), "random: the seed (default 1)")(
      "time-limit", po::value<std::string>(), "moetuner: wall-clock cap such as 60s (default: the work limit only)")(
      "dispatch", po::value<std::string>(),
      "flat (default) or residence: moetuner and exflow weigh the cross-layer pairs from a token's owner")(
      "output,o", po::value<std::string>()->required(), "the placement file to write")(
      "force", po::bool_switch(), "replace an existing output file");
  const sim::PlacementRegistry registry = sim::default_placement_registry();
  auto vm = parse_options(args, opts, po::positional_options_description(),
                          "moesim place --trace T [--trace T2 ... [--weight W --weight W2 ...] "
                          "[--objective expected|worst]] --architecture A --cluster C --policy P [--tp N] [--ep N] "
                          "[--replicas N] [--groups G] [--time-limit 60s] [--dispatch flat|residence] "
                          "-o placement.yaml",
                          "Solves an expert placement and writes a placement file (docs/placement-format.md).\n"
                          "With several --trace, one placement for all of them: --objective expected solves on\n"
                          "their weighted mix, worst keeps the candidate with the least worst-trace max/mean\n"
                          "(docs/placement.md, \"Several traces\").\n"
                          "Subcommands: moesim place evaluate | compare | export (see their --help).\n"
                          "Policies:\n" +
                              policy_list(registry),
                          ctx);
  if (!vm) return common::kExitOk;
  const std::string output = (*vm)["output"].as<std::string>();
  common::check_can_write(output, (*vm)["force"].as<bool>());
  const auto policy = registry.create((*vm)["policy"].as<std::string>());
  const models::Architecture arch = models::load_architecture((*vm)["architecture"].as<std::string>());
  const models::Cluster cluster = models::load_cluster((*vm)["cluster"].as<std::string>());
  const int tp = parse_int_option(*vm, "tp", 1, 1024, 1);
  const int ep = parse_int_option(*vm, "ep", 1, 1 << 20, std::max(1, cluster.total_gpus() / tp));
  sim::PlacementOptions options;
  options.replicas = parse_int_option(*vm, "replicas", 0, 1 << 16, 0);
  options.groups = parse_int_option(*vm, "groups", 0, 1 << 16, 0);
  options.seed = static_cast<std::uint64_t>(parse_int_option(*vm, "seed", 0, 2147483647, 1));
  options.residence = parse_residence(*vm);
  if (vm->count("time-limit")) {
    const std::string text = (*vm)["time-limit"].as<std::string>();
    const auto t = common::parse_unit(text, common::UnitKind::kTime);
    if (!t || *t <= 0)
      throw common::UsageError("--time-limit: expected a positive time such as 60s, got " + common::quoted(text));
    options.time_limit = *t;
  }
  const auto trace_files =
      vm->count("trace") ? (*vm)["trace"].as<std::vector<std::string>>() : std::vector<std::string>{};
  const std::vector<double> weights = parse_weights(*vm, trace_files.size());
  const sim::RobustObjective objective = vm->count("objective")
                                             ? sim::parse_robust_objective((*vm)["objective"].as<std::string>())
                                             : sim::RobustObjective::kExpected;
  if (policy->needs_routing() && trace_files.empty())
    throw common::UsageError("placement policy " + policy->name() + " is solved on routing statistics: give --trace");
  sim::Placement placement;
  if (trace_files.size() > 1) {
    const auto traces = robust_traces(trace_files, weights, arch, policy->needs_routing());
    const sim::PlacementInput input{arch, cluster, ep, tp, nullptr, options};
    placement = sim::place_robust(*policy, input, traces, objective);
  } else {
    // One trace (or none): solved as it always was; --weight and --objective change nothing.
    sim::RoutingCounts routing;
    const bool with_routing = !trace_files.empty();
    if (with_routing) {
      const std::string& file = trace_files.front();
      const traces::TraceShape shape = shape_and_counts(file, false, routing, "");
      const std::string mismatch = models::trace_shape_mismatch(shape, arch);
      if (policy->needs_routing() && !mismatch.empty())
        throw common::InputError(file + ": " + mismatch + " (--architecture " + arch.name + ")");
      shape_and_counts(file, true, routing, common::sha256_file(file));
    }
    const sim::PlacementInput input{
        arch, cluster, ep, tp, with_routing && policy->needs_routing() ? &routing : nullptr, options};
    placement = policy->place(input);
  }
  sim::validate_placement(placement, arch, "placement policy " + policy->name());
  sim::save_placement(placement, output, (*vm)["force"].as<bool>());
  ctx.out << "wrote " << output << ": policy " << placement.policy << ", " << arch.name << " on " << cluster.name
          << ", ep " << ep << ", tp " << tp << "\n";
  if (placement.report.contains("robust")) print_robust(ctx.out, placement.report["robust"]);
  print_report(ctx.out, placement);
  return common::kExitOk;
}

void add_eval_options(po::options_description& opts) {
  opts.add_options()("trace", po::value<std::string>()->required(), "the held-out routing trace")(
      "study", po::value<std::string>(),
      "study whose baseline gives the workload, profile and overlap policy "
      "(default configs/studies/default.yaml)")("architecture", po::value<std::string>(),
                                                "override the placement file's architecture")(
      "cluster", po::value<std::string>(), "override the placement file's cluster")(
      "steps", po::value<std::string>(), "simulated steps (default: the study's)")(
      "no-simulate", po::bool_switch(), "only the figures computed from the trace, no simulation")(
      "dispatch", po::value<std::string>(),
      "flat (default: from the home rank) or residence (from the owner rank, and simulated so)")(
      "json", po::bool_switch(), "print JSON instead of the table");
}

// The held-out figures, and the simulated ones unless --no-simulate.
sim::PlacementEvaluation evaluate(const sim::CheckedPlacement& checked, const po::variables_map& vm) {
  const std::string trace = vm["trace"].as<std::string>();
  const bool residence = parse_residence(vm);
  sim::PlacementEvaluation e = sim::evaluate_placement(checked, trace, residence);
  if (vm["no-simulate"].as<bool>()) return e;
  sim::PlacementSimOptions o;
  if (vm.count("study")) o.study = vm["study"].as<std::string>();
  o.steps = parse_int_option(vm, "steps", 1, 1000000, 0);
  o.residence = residence;  // simulated in the dispatch mode the figures are counted in
  sim::simulate_placement(checked, trace, o, e);
  return e;
}

sim::PlacementOverrides overrides(const po::variables_map& vm) {
  sim::PlacementOverrides o;
  if (vm.count("architecture")) o.architecture = vm["architecture"].as<std::string>();
  if (vm.count("cluster")) o.cluster = vm["cluster"].as<std::string>();
  return o;
}

int run_evaluate(const Args& args, Context& ctx) {
  po::options_description opts("Options");
  opts.add_options()("placement", po::value<std::string>()->required(), "the placement file");
  add_eval_options(opts);
  auto vm =
      parse_options(args, opts, po::positional_options_description(),
                    "moesim place evaluate --placement F --trace HELD_OUT [--study S] [--dispatch flat|residence] "
                    "[--json]",
                    "Scores a placement on a trace it was not solved on: per-layer max/mean rank load, the share\n"
                    "of token dispatches leaving the GPU and the node, bytes per rank pair, the cross-layer\n"
                    "traffic objective, and, simulated, per-layer tail latency, step p50/p99 and energy.",
                    ctx);
  if (!vm) return common::kExitOk;
  const auto checked = sim::load_checked_placement((*vm)["placement"].as<std::string>(), overrides(*vm));
  const auto e = evaluate(checked, *vm);
  if ((*vm)["json"].as<bool>())
    ctx.out << e.to_json().dump(2) << "\n";
  else
    ctx.out << sim::evaluation_table(e);
  return common::kExitOk;
}

int run_compare(const Args& args, Context& ctx) {
  po::options_description opts("Options");
  opts.add_options()("placements", po::value<std::vector<std::string>>()->multitoken()->required(),
                     "the placement files (two or more)");
  add_eval_options(opts);
  auto vm = parse_options(args, opts, po::positional_options_description(),
                          "moesim place compare --placements F1 F2 ... --trace HELD_OUT [--study S] "
                          "[--dispatch flat|residence] [--json]",
                          "Scores several placements on the same held-out trace, side by side.", ctx);
  if (!vm) return common::kExitOk;
  const auto files = (*vm)["placements"].as<std::vector<std::string>>();
  std::vector<sim::CheckedPlacement> checked;
  for (const auto& f : files) checked.push_back(sim::load_checked_placement(f, overrides(*vm)));
  std::vector<sim::PlacementEvaluation> all;
  for (const auto& c : checked)
    all.push_back(evaluate(c, *vm));
  if ((*vm)["json"].as<bool>()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& e : all) j.push_back(e.to_json());
    ctx.out
        << nlohmann::json{{"schema_version", 1},
                          {"trace", (*vm)["trace"].as<std::string>()},
                          {"dispatch", parse_residence(*vm) ? "residence" : "flat"},
                          {"placements", j}}
               .dump(2)
        << "\n";
  } else {
    ctx.out << sim::comparison_table(all);
  }
  return common::kExitOk;
}

int run_export(const Args& args, Context& ctx) {
  po::options_description opts("Options");
  opts.add_options()("placement", po::value<std::string>()->required(), "the placement file")(
      "format", po::value<std::string>()->required(), "sglang, vllm, vllm-ascend, megatron or permutation")(
      "output,o", po::value<std::string>(),
      "the JSON file to write (sglang, vllm-ascend, permutation; vllm and megatron read none)")(
      "force", po::bool_switch(), "replace an existing output file");
  auto vm = parse_options(
      args, opts, po::positional_options_description(),
      "moesim place export --placement F --format sglang|vllm|vllm-ascend|megatron|permutation [-o OUT.json] [--force]",
      "Hands a placement to a serving engine in the form the engine reads, and prints its launch options:\n"
      "  sglang       the --init-expert-location file (one physical-to-logical row per decoder layer)\n"
      "  vllm         no file (vLLM loads no map): the --expert-placement-strategy that rebuilds a contiguous\n"
      "               or round-robin placement; anything else is refused\n"
      "  vllm-ascend  the expert_map_path file of --additional-config (one entry per MoE layer)\n"
      "  megatron     no file: the options of Megatron-Core's contiguous layout, the only one it has\n"
      "  permutation  per MoE layer, the expert order that makes the engines' contiguous layout this\n"
      "               placement once the checkpoint is permuted by it (docs/placement.md)",
      ctx);
  if (!vm) return common::kExitOk;
  const std::string format_name = (*vm)["format"].as<std::string>();
  const sim::ExportFormat format = sim::parse_export_format(format_name);
  const bool writes = format != sim::ExportFormat::kVllm && format != sim::ExportFormat::kMegatron;
  const std::string output = vm->count("output") ? (*vm)["output"].as<std::string>() : "";
  if (writes && output.empty())
    throw common::UsageError("--format " + format_name + " writes a file: give -o OUT.json");
  if (!writes && !output.empty())
    throw common::UsageError("--format " + format_name + " writes no file (" +
                             (format == sim::ExportFormat::kVllm ? "vLLM" : "Megatron-Core") +
                             " reads no expert map): drop -o; the command prints the options that rebuild the "
                             "placement, or refuses it");
  // SGLang reads --init-expert-location as a file only when the name ends in .json or .pt (else as inline
  // JSON): python/sglang/srt/eplb/expert_location.py, compute_initial_expert_location_metadata.
  if (format == sim::ExportFormat::kSglang && fs::path(output).extension() != ".json")
    throw common::UsageError("-o " + common::quoted(output) + ": SGLang reads --init-expert-location as a file only "
                             "when its name ends in .json (any other value is parsed as inline JSON); name it "
                             "OUT.json");
  const bool force = (*vm)["force"].as<bool>();
  if (writes) common::check_can_write(output, force);
  const std::string path = (*vm)["placement"].as<std::string>();
  const auto checked = sim::load_checked_placement(path);
  const sim::PlacementExport e = sim::export_placement(checked.placement, checked.arch, format, path, output);
  if (writes) {
    common::write_file_atomic(output, e.file.dump(1) + "\n", force);
    ctx.out << "wrote " << output << " (" << format_name << ", " << checked.arch.name << ", "
            << checked.placement.layers.size() << " MoE layers of " << checked.arch.num_layers << ", ep "
            << checked.placement.ep << ")\n";
  } else {
    ctx.out << format_name << ": " << checked.placement.policy << " placement of " << checked.arch.name << ", ep "
            << checked.placement.ep << ": no file to write\n";
  }
  if (!e.flags.empty()) {
    ctx.out << "launch options:";
    for (const auto& f : e.flags) ctx.out << " " << f;
    ctx.out << "\n";
  }
  for (const auto& n : e.notes) ctx.out << "  note: " << n << "\n";
  return common::kExitOk;
}

}  // namespace

void register_place_commands(std::vector<Command>& commands) {
  commands.push_back(
      {"place", "solve an expert placement (random, greedy, eplb, moetuner, ...) into a placement file", run_place});
  commands.push_back(
      {"place evaluate", "score a placement on held-out traffic (loads, traffic, simulated latency)", run_evaluate});
  commands.push_back({"place compare", "score several placements side by side on held-out traffic", run_compare});
  commands.push_back({"place export",
                      "hand a placement to SGLang, vLLM or Megatron (map file, options, or checkpoint permutation)",
                      run_export});
}

}  // namespace moesim::cli
