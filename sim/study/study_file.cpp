#include "sim/study/study_file.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <iomanip>
#include <sstream>
#include <string_view>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/strings.hpp"
#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "models/config_header.hpp"
#include "models/profile.hpp"
#include "sim/engine/simgrid_settings.hpp"
#include "sim/placement/placement.hpp"
#include "sim/placement/policy.hpp"
#include "traces/load_trace.hpp"
#include "traces/trace.hpp"

namespace moesim::sim {

namespace fs = std::filesystem;
using common::InputError;
using common::YamlNode;

namespace {

constexpr std::size_t kMaxVariants = 10000;
constexpr std::size_t kMaxVariantName = 120;
// The largest cluster a study simulates: it builds hosts, links and routes for every GPU, at a cost
// that grows with the square of the GPUs (a 5-step decode of a tiny model: 2,048 GPUs 14 s and
// 0.6 GB, 4,096 GPUs 64 s and 2.1 GB; 16,384 GPUs grew past 6 GB in 4 minutes without a step).
constexpr int kMaxGpus = 4096;

// Every value a variant may assign, as a key path below `base`. Sections hold leaves; only leaves are
// swept, so that a variant never replaces a whole section by accident.
const std::vector<std::string>& scenario_leaves() {
  static const std::vector<std::string> leaves{"architecture",
                                               "cluster",
                                               "profile",
                                               "trace",
                                               "parallelism.tp",
                                               "parallelism.ep",
                                               "workload.mode",
                                               "workload.tokens_per_step",
                                               "workload.batch_sequences",
                                               "workload.decode_start",
                                               "workload.steps",
                                               "workload.warmup_steps",
                                               "workload.micro_batches",
                                               "workload.gradient",
                                               "workload.batch",
                                               "workload.sequence_length",
                                               "workload.synthetic.compute",
                                               "workload.synthetic.a2a_bytes",
                                               "workload.synthetic.layers",
                                               "workload.synthetic.overlap",
                                               "placement.policy",
                                               "placement.file",
                                               "placement.replicas",
                                               "placement.groups",
                                               "placement.rebalance.every_steps",
                                               "placement.rebalance.window_steps",
                                               "placement.rebalance.migration",
                                               "overlap.policy",
                                               "overlap.chunks",
                                               "overlap.timelines",
                                               "dispatch.mode",
                                               "dispatch.sms",
                                               "dispatch.pieces",
                                               "network.fidelity",
                                               "network.tolerance",
                                               "power_cap",
                                               "clock_limit",
                                               "seed",
                                               "simgrid"};
  return leaves;
}

bool is_section(const std::string& path) {
  static const std::set<std::string> sections{"parallelism", "workload", "workload.synthetic", "placement",
                                              "placement.rebalance", "overlap", "dispatch", "network"};
  return sections.count(path) > 0;
}

bool is_leaf(const std::string& path) {
  const auto& leaves = scenario_leaves();
  return std::find(leaves.begin(), leaves.end(), path) != leaves.end();
}

bool is_list_leaf(const std::string& path) { return path == "simgrid"; }

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos || s.ends_with(".yaml") || s.ends_with(".yml");
}

bool is_power_of_two(std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; }


// Configs loaded while validating, shared by the variants of one study (they often name the same ones).
// What a study needs to know of a trace file before running it: its routing shape and whether it
// holds anything to replay.
struct TraceInfo {
  traces::TraceShape shape;
  bool empty = false;
};

struct Loaded {
  std::map<std::string, models::Architecture> architectures;
  std::map<std::string, models::Cluster> clusters;
  std::map<std::string, models::Profile> profiles;
  std::map<std::string, TraceInfo> traces;
  std::map<std::string, Placement> placements;
  std::map<std::string, std::string> simgrid_problems;  // setting -> "" (accepted) or SimGrid's reason
  PlacementRegistry registry = default_placement_registry();
};

bool set_on_command_line(const YamlNode& node) { return node.location().starts_with("--set "); }

// A relative path is relative to the study file's folder; one given with --set, to the working directory.
fs::path resolve_path(const YamlNode& node, const fs::path& dir) {
  fs::path p(node.as_string());
  if (p.is_relative()) p = (set_on_command_line(node) ? fs::current_path() : dir) / p;
  return p.lexically_normal();
}

std::string relative_hint(const YamlNode& node, const fs::path& dir) {
  return set_on_command_line(node) ? "relative paths given with --set are relative to the working directory"
                                   : "relative paths are relative to the study file's folder " + dir.string();
}

fs::path existing_file(const YamlNode& node, const fs::path& dir) {
  const fs::path p = resolve_path(node, dir);
  std::error_code ec;
  if (!fs::is_regular_file(p, ec))
    node.fail("expected an existing file, got " + common::quoted(node.as_string(), 200) + ": " + p.string() +
              (fs::exists(p, ec) ? " is not a file" : " does not exist") + " (" + relative_hint(node, dir) + ")");
  return p;
}

// A config given by name (configs/<kind>/NAME.yaml) or by path: returns the name, or the absolute path.
std::string config_ref(const YamlNode& node, std::string_view kind, const fs::path& dir) {
  const std::string text = node.as_string();
  if (looks_like_path(text)) return existing_file(node, dir).string();
  try {
    common::resolve_config(kind, text);
  } catch (const InputError& e) {
    node.fail(e.what());
  }
  return text;
}

template <typename T, typename Load>
const T& load_once(std::map<std::string, T>& cache, const std::string& key, const YamlNode& node, Load load) {
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  try {
    return cache.emplace(key, load(key)).first->second;
  } catch (const InputError& e) {
    node.fail(std::string("cannot use it: ") + e.what());
  }
}

int as_int(const YamlNode& node, std::int64_t min, std::int64_t max) { return static_cast<int>(node.as_int(min, max)); }


Workload parse_workload(const YamlNode& node) {
  node.expect_map();
  node.allow_keys({"mode", "tokens_per_step", "batch_sequences", "decode_start", "steps", "warmup_steps", "micro_batches",
                   "gradient", "batch", "sequence_length", "synthetic"});
  Workload w;
  w.mode = node.at("mode").as_enum<WorkloadMode>(kWorkloadModes);
  if (auto n = node.find("tokens_per_step")) w.tokens_per_step = static_cast<long>(n->as_int(1, std::int64_t{1} << 26));
  if (auto n = node.find("batch_sequences")) w.batch_sequences = as_int(*n, 1, 1 << 20);
  if (auto n = node.find("decode_start")) w.decode_staggered = n->as_enum({"staggered", "aligned"}) == "staggered";
  if (auto n = node.find("steps")) w.steps = as_int(*n, 1, 10'000'000);
  if (auto n = node.find("warmup_steps")) w.warmup_steps = as_int(*n, 0, 1'000'000);
  if (auto n = node.find("micro_batches")) w.micro_batches = as_int(*n, 1, 65536);
  if (auto n = node.find("gradient"))
    w.gradient = n->as_enum<GradientSync>(kGradientSyncs);
  if (auto n = node.find("batch")) w.batch = as_int(*n, 1, 65536);
  if (auto n = node.find("sequence_length")) w.sequence_length = static_cast<long>(n->as_int(1, std::int64_t{1} << 24));
  if (auto syn = node.find("synthetic")) {
    syn->expect_map();
    syn->allow_keys({"compute", "a2a_bytes", "layers", "overlap"});
    if (auto n = syn->find("compute")) w.synthetic_compute = n->as_unit(common::UnitKind::kTime, 1e-9, 100.0);
    if (auto n = syn->find("a2a_bytes"))
      w.synthetic_a2a_bytes = n->as_unit(common::UnitKind::kBytes, 0.0, 1024.0 * 1024.0 * 1024.0 * 1024.0);
    if (auto n = syn->find("layers")) w.synthetic_layers = as_int(*n, 1, 100000);
    if (auto n = syn->find("overlap")) w.synthetic_overlap = n->as_bool();
  }
  return w;
}

// --cfg settings are "name:value"; a leading "--cfg=" is accepted and dropped.
// A SimGrid setting as --cfg takes it: "name:value", the name of letters, digits and / _ - .
bool valid_simgrid_setting(const std::string& s) {
  const auto colon = s.find(':');
  return colon != std::string::npos && colon > 0 && colon + 1 < s.size() &&
         std::all_of(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(colon), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' || c == '_' ||
                  c == '-' || c == '.';
         });
}

std::vector<std::string> parse_simgrid(const YamlNode& node, Loaded& loaded) {
  std::vector<std::string> out;
  for (const YamlNode& item : node.items()) {
    std::string s = item.as_string();
    if (s.starts_with("--cfg=")) s = s.substr(6);
    if (!valid_simgrid_setting(s))
      item.fail_expected("a SimGrid setting \"name:value\" as given to --cfg (e.g. \"network/model:CM02\")");
    auto it = loaded.simgrid_problems.find(s);
    if (it == loaded.simgrid_problems.end()) it = loaded.simgrid_problems.emplace(s, simgrid_setting_problem(s)).first;
    if (!it->second.empty())
      item.fail("expected a SimGrid setting that SimGrid accepts, got " + common::quoted(s, 200) +
                ", which SimGrid refuses: " + it->second.substr(0, 300));
    out.push_back(s);
  }
  return out;
}

// Parallelism: a TP group stays inside a node; tp x ep GPUs form one EP group, and the cluster's GPUs
// must be a whole number of such groups (the rest are data-parallel copies of it).
void parse_parallelism(const YamlNode& node, const models::Cluster& cluster, Scenario& s) {
  std::optional<YamlNode> par = node.find("parallelism");
  if (par) {
    par->expect_map();
    par->allow_keys({"tp", "ep"});
  }
  std::optional<YamlNode> tp_node = par ? par->find("tp") : std::nullopt;
  std::optional<YamlNode> ep_node = par ? par->find("ep") : std::nullopt;
  const YamlNode& tp_at = tp_node ? *tp_node : (par ? *par : node);
  s.tp = tp_node ? as_int(*tp_node, 1, 1024) : 1;
  if (!is_power_of_two(s.tp) || cluster.gpus_per_node % s.tp != 0)
    tp_at.fail("expected tp to be a power of two dividing the " + std::to_string(cluster.gpus_per_node) +
               " GPUs per node of cluster " + cluster.name + " (a TP group stays inside a node), got " +
               std::to_string(s.tp));
  s.ep = ep_node ? as_int(*ep_node, 1, 1 << 20) : cluster.total_gpus() / s.tp;
  const long group = static_cast<long>(s.ep) * s.tp;
  if (group > cluster.total_gpus() || cluster.total_gpus() % group != 0)
    (ep_node ? *ep_node : tp_at)
        .fail("expected ep x tp (" + std::to_string(s.ep) + " x " + std::to_string(s.tp) + " = " +
              std::to_string(group) + " GPUs) to divide the " + std::to_string(cluster.total_gpus()) +
              " GPUs of cluster " + cluster.name + " (at most ep " + std::to_string(cluster.total_gpus() / s.tp) +
              " with tp " + std::to_string(s.tp) + ")");
}

// Where workload errors about dispatch.mode point: the key, else its section, else the scenario.
YamlNode dispatch_mode_node(const YamlNode& node) {
  const std::optional<YamlNode> d = node.find("dispatch");
  if (!d) return node;
  const std::optional<YamlNode> mode = d->find("mode");
  return mode ? *mode : *d;
}

// Every EP rank holds at least one expert slot of each MoE layer: the experts plus the redundant
// slots a replicating policy adds (placement.replicas). A synthetic workload routes no token to an
// expert (its all-to-all is a given size spread over the EP ranks), so any EP it has is fine.
void check_ep_against_experts(const YamlNode& node, const models::Architecture& arch, const Scenario& s) {
  if (!arch.is_moe() || s.workload.mode == WorkloadMode::kSynthetic) return;
  const long slots = static_cast<long>(arch.num_experts) + s.placement.replicas;
  if (s.ep <= slots) return;
  std::optional<YamlNode> par = node.find("parallelism");
  std::optional<YamlNode> ep_node = par ? par->find("ep") : std::nullopt;
  (ep_node ? *ep_node : node.at("cluster"))
      .fail("expected ep at most " + std::to_string(slots) + " (the " + std::to_string(arch.num_experts) +
            " experts of " + arch.name + (s.placement.replicas > 0 ? " plus placement.replicas " +
            std::to_string(s.placement.replicas) : std::string()) + ": every EP rank holds at least one expert), got " +
            std::to_string(s.ep) + (ep_node ? "" : " (the default, every GPU of the cluster)") +
            "; set parallelism.ep or placement.replicas");
}

// One trace file of the architecture's routing shape: its absolute path.
std::string checked_trace(const YamlNode& node, const models::Architecture& arch, const fs::path& dir, Loaded& loaded) {
  if (!node.is_scalar()) node.fail_expected("a trace file path");
  const std::string path = existing_file(node, dir).string();
  // A routing trace, or a load-only trace (its counts replayed, make_load_source).
  const TraceInfo& info = load_once(loaded.traces, path, node, [](const std::string& p) {
    if (traces::is_load_trace(p)) return TraceInfo{traces::open_load_trace(p)->meta().shape, false};
    const auto reader = traces::open_trace(p);
    return TraceInfo{reader->meta().shape, reader->meta().token_count == 0};
  });
  if (info.empty)
    node.fail("expected a trace with at least one token to replay, got " + path +
              ", which holds none; record or generate some routing (moesim trace import, moesim trace generate)");
  if (const std::string mismatch = models::trace_shape_mismatch(info.shape, arch); !mismatch.empty())
    node.fail(mismatch);
  return path;
}

// trace: {phases: [{trace: A, steps: N}, ...]} or {mix: [{trace: A, weight: W}, ...]}.
void parse_trace_parts(const YamlNode& node, const models::Architecture& arch, const fs::path& dir, Loaded& loaded,
                       Scenario& s) {
  node.allow_keys({"phases", "mix"});
  const auto phases = node.find("phases"), mix = node.find("mix");
  if (phases && mix) mix->fail("expected either trace.phases or trace.mix, got both; keep one");
  if (!phases && !mix) node.fail_expected("trace.phases (traces one after the other) or trace.mix (traces by weight)");
  const YamlNode& list = phases ? *phases : *mix;
  const std::string what = phases ? "phase" : "mix entry";
  if (!list.is_sequence()) list.fail_expected("a list of " + what + " maps");
  const std::vector<YamlNode> items = list.items();
  if (items.empty())
    list.fail_expected(std::string("at least one ") + what + (phases ? " ({trace: FILE, steps: N})" : " ({trace: FILE, weight: W})"));
  s.trace_mix = phases ? TraceMix::kPhases : TraceMix::kMix;
  for (const YamlNode& item : items) {
    item.expect_map();
    item.allow_keys({"trace", phases ? "steps" : "weight"});
    TracePart part;
    part.path = checked_trace(item.at("trace"), arch, dir, loaded);
    if (mix && traces::is_load_trace(part.path))
      item.at("trace").fail("expected a per-token trace in trace.mix (a mix draws whole sequences), got a load-only "
                            "trace, which has none; use it alone or as a phase");
    if (phases) {
      part.steps = as_int(item.at("steps"), 1, 1 << 24);
    } else {
      const YamlNode w = item.at("weight");
      const auto v = w.number();
      if (!v || !(*v > 0.0) || !std::isfinite(*v)) w.fail_expected("a weight > 0 (the entry's share of the sequences)");
      part.weight = *v;
    }
    s.trace_parts.push_back(std::move(part));
  }
  s.trace = s.trace_parts.front().path;
}

// The routing trace: required for MoE prefill, decode and training, refused for dense models and
// synthetic workloads, and of the architecture's shape. Returns whether there is one.
bool parse_trace(const YamlNode& node, const models::Architecture& arch, const fs::path& dir, Loaded& loaded,
                 Scenario& s) {
  const bool synthetic = s.workload.mode == WorkloadMode::kSynthetic;
  std::optional<YamlNode> trace_node = node.find("trace");
  const bool balanced = trace_node && trace_node->is_scalar() && trace_node->as_string() == "balanced";
  const bool has_trace = trace_node && !balanced && !(trace_node->is_scalar() && trace_node->as_string() == "none");
  if (balanced) {
    if (!arch.is_moe() || (s.workload.mode != WorkloadMode::kPrefill && s.workload.mode != WorkloadMode::kDecode))
      trace_node->fail("expected trace: balanced only for prefill or decode of an MoE model (it replaces recorded "
                       "routing), got workload.mode " + workload_mode_name(s.workload.mode) + " of " + arch.name +
                       (arch.is_moe() ? "; give a trace file" : "; write trace: none"));
    s.balanced_routing = true;
  } else if (has_trace) {
    if (!arch.is_moe())
      trace_node->fail("expected no trace for " + arch.name +
                       ", a dense model (it has no routing to replay), got one; remove it or write trace: none");
    if (synthetic)
      trace_node->fail(
          "expected no trace for workload.mode synthetic (its traffic is given by workload.synthetic), "
          "got one; remove it or write trace: none");
    if (trace_node->is_map()) {
      parse_trace_parts(*trace_node, arch, dir, loaded, s);
    } else {
      s.trace = checked_trace(*trace_node, arch, dir, loaded);
    }
  } else if (arch.is_moe() && !synthetic) {
    (trace_node ? *trace_node : node)
        .fail("expected a trace (the routing to replay, or balanced for prefill and decode) for workload.mode " +
              workload_mode_name(s.workload.mode) + " of " + arch.name + ", an MoE model, got none");
  }
  return has_trace;
}

// placement.rebalance: {every_steps: N | never, window_steps: W, migration: blocking | background | free}.
void parse_rebalance(const YamlNode& r, Loaded& loaded, Scenario& s) {
  if (r.is_scalar() && r.raw().Scalar() == "none") return;
  r.expect_map();
  r.allow_keys({"every_steps", "window_steps", "migration"});
  RebalanceOptions o;
  const YamlNode every = r.at("every_steps");
  if (!(every.is_scalar() && every.raw().Scalar() == "never")) o.every_steps = as_int(every, 1, 1 << 24);
  const std::optional<YamlNode> window = r.find("window_steps");
  if (window) o.window_steps = as_int(*window, 1, 1 << 24);
  if (auto m = r.find("migration")) o.migration = m->as_enum<MigrationMode>(kMigrationModes);
  // never: a static placement, the same scenario as without the key.
  if (o.every_steps == 0) return;
  const int run = s.workload.warmup_steps + s.workload.steps;
  // Unless given: the steps since the last rebalance (all of them in a run shorter than the interval).
  if (o.window_steps == 0) o.window_steps = std::min(o.every_steps, run);
  if (s.workload.mode != WorkloadMode::kPrefill && s.workload.mode != WorkloadMode::kDecode)
    r.fail("expected placement.rebalance only for prefill or decode (online rebalancing re-solves a serving "
           "placement), got workload.mode " + workload_mode_name(s.workload.mode) + "; remove it");
  if (!s.placement.file.empty())
    r.fail("expected placement.rebalance with a placement policy to solve again, got a fixed placement.file; write "
           "file: none and name the policy");
  if (!loaded.registry.create(s.placement.policy)->needs_routing())
    r.fail("expected placement.rebalance with a policy that reads load (eplb, greedy, moetuner, ...), got " +
           s.placement.policy + ", which places the same experts whatever the load");
  if (s.balanced_routing)
    r.fail("expected placement.rebalance with recorded routing, got trace: balanced (every window is balanced)");
  if (o.window_steps > run)
    (window ? *window : every)
        .fail("expected a window of at most the run's " + std::to_string(run) +
              " steps (workload.warmup_steps + steps), got " + std::to_string(o.window_steps) +
              "; shorten placement.rebalance.window_steps or run more steps");
  s.placement.rebalance = o;
}

void parse_placement(const YamlNode& pl, const models::Architecture& arch, bool has_trace, const fs::path& dir,
                     Loaded& loaded, Scenario& s) {
  pl.expect_map();
  pl.allow_keys({"policy", "file", "replicas", "groups", "rebalance"});
  if (auto policy = pl.find("policy")) {
    const std::vector<std::string> names = loaded.registry.names();
    s.placement.policy = policy->as_enum(names);
    const bool synthetic = s.workload.mode == WorkloadMode::kSynthetic;
    if (arch.is_moe() && !synthetic && !has_trace && loaded.registry.create(s.placement.policy)->needs_routing())
      policy->fail("placement policy " + s.placement.policy + " is solved on routing statistics: give a trace" +
                   (s.balanced_routing ? " file (trace: balanced has no recorded routing)" : ""));
  }
  std::optional<YamlNode> file = pl.find("file");
  if (file && file->is_scalar() && file->as_string() == "none") file.reset();
  if (file) {
    if (!arch.is_moe())
      file->fail("expected no placement file for " + arch.name + ", a dense model (it has no experts), got one");
    const fs::path path = existing_file(*file, dir);
    s.placement.file = path.string();
    const Placement& p =
        load_once(loaded.placements, s.placement.file, *file, [](const std::string& f) { return load_placement(f); });
    try {
      validate_placement(p, arch, s.placement.file);
    } catch (const InputError& e) {
      file->fail(std::string("the placement does not fit this scenario's architecture: ") + e.what());
    }
    if (p.ep != s.ep || p.tp != s.tp)
      file->fail("expected a placement for ep " + std::to_string(s.ep) + ", tp " + std::to_string(s.tp) +
                 " (this scenario's parallelism), got one for ep " + std::to_string(p.ep) + ", tp " +
                 std::to_string(p.tp));
  }
  if (auto n = pl.find("replicas")) s.placement.replicas = as_int(*n, 0, 1 << 16);
  if (auto n = pl.find("groups")) {
    s.placement.groups = as_int(*n, 0, std::max(arch.num_experts, 1));
    if (s.placement.groups > 0 && arch.num_experts % s.placement.groups != 0)
      n->fail_expected("0 or a divisor of num_experts (" + std::to_string(arch.num_experts) + ")");
  }
  if (auto r = pl.find("rebalance")) parse_rebalance(*r, loaded, s);
}

void parse_overlap(const YamlNode& ov, Scenario& s) {
  ov.expect_map();
  ov.allow_keys({"policy", "chunks", "timelines"});
  if (auto n = ov.find("policy")) {
    s.overlap.policy = n->as_enum<OverlapPolicy>(kOverlapPolicies);
    const bool inference = s.workload.mode == WorkloadMode::kPrefill || s.workload.mode == WorkloadMode::kDecode;
    if (!inference && (s.overlap.policy == OverlapPolicy::kTbo || s.overlap.policy == OverlapPolicy::kAuto))
      n->fail("expected sequential, overlapped or ideal for workload.mode " + workload_mode_name(s.workload.mode) +
              " (" + overlap_policy_name(s.overlap.policy) + " schedules the MoE layers of prefill and decode), got " +
              overlap_policy_name(s.overlap.policy));
  }
  if (auto n = ov.find("chunks")) s.overlap.chunks = as_int(*n, 1, 64);
  if (auto n = ov.find("timelines")) s.overlap.timelines = n->as_enum<Timelines>(kTimelines);
}

void parse_dispatch(const YamlNode& d, Scenario& s) {
  d.expect_map();
  d.allow_keys({"mode", "sms", "pieces"});
  if (auto n = d.find("mode")) {
    s.dispatch = n->as_enum<DispatchMode>(kDispatchModes);
    // Residence (docs/simulator.md, "Residence dispatch"): tokens stay with their experts between the
    // layers of an inference step.
    if (s.dispatch == DispatchMode::kResidence && s.workload.mode != WorkloadMode::kPrefill &&
        s.workload.mode != WorkloadMode::kDecode)
      n->fail("expected flat, hierarchical or low_latency for workload.mode " + workload_mode_name(s.workload.mode) +
              " (residence keeps each token on the GPU of its experts between the layers of an inference step; "
              "prefill and decode only), got residence");
    if (s.dispatch == DispatchMode::kResidence && s.overlap.policy == OverlapPolicy::kTbo)
      n->fail("expected flat, hierarchical or low_latency with overlap.policy tbo (two-batch overlap splits the step "
              "by home rank, and residence moves each token's attention to its experts' GPU), got residence; "
              "choose overlap.policy sequential, overlapped or ideal");
  }
  if (auto n = d.find("sms")) {
    if (n->is_scalar() && n->as_string() == "default")
      s.dispatch_sms = -1;
    else
      s.dispatch_sms = as_int(*n, 0, 4096);
  }
  if (auto n = d.find("pieces")) s.dispatch_pieces = as_int(*n, 1, 64);
}

void parse_network(const YamlNode& n, Scenario& s) {
  n.expect_map();
  n.allow_keys({"fidelity", "tolerance"});
  if (auto f = n.find("fidelity")) s.fidelity = f->as_enum<NetworkFidelity>(kNetworkFidelities);
  if (auto t = n.find("tolerance")) {
    if (t->is_scalar() && t->raw().Scalar() == "auto") {
      s.network_tolerance = kAutoTolerance;
    } else {
      const auto v = t->number();
      if (!v || *v < 0.0 || *v > 0.5) t->fail_expected("auto or a number between 0 and 0.5");
      s.network_tolerance = *v;
    }
  }
}

// A power cap or an SM clock limit: a value with its unit between `low` and `high`, or none (0).
double parse_limit(const YamlNode& n, common::UnitKind kind, double low, double high, const std::string& expected) {
  const std::string text = n.is_scalar() ? n.raw().Scalar() : std::string();
  if (text == "none") return 0.0;
  const auto value = n.is_scalar() ? common::parse_unit(text, kind) : std::nullopt;
  if (!value || *value < low || *value > high) n.fail_expected(expected);
  return *value;
}

Scenario parse_scenario_with(const YamlNode& node, const fs::path& dir, Loaded& loaded) {
  node.expect_map();
  node.allow_keys({"architecture", "cluster", "profile", "trace", "parallelism", "workload", "placement", "overlap",
                   "dispatch", "network", "power_cap", "clock_limit", "seed", "simgrid"});
  Scenario s;

  const YamlNode arch_node = node.at("architecture");
  s.architecture = config_ref(arch_node, "architectures", dir);
  const models::Architecture& arch = load_once(loaded.architectures, s.architecture, arch_node,
                                               [](const std::string& r) { return models::load_architecture(r); });
  const YamlNode cluster_node = node.at("cluster");
  s.cluster = config_ref(cluster_node, "clusters", dir);
  const models::Cluster& cluster =
      load_once(loaded.clusters, s.cluster, cluster_node, [](const std::string& r) { return models::load_cluster(r); });
  const std::optional<YamlNode> profile_node = node.find("profile");
  if (profile_node) s.profile = config_ref(*profile_node, "profiles", dir);
  // The profile is read here, as the run reads it, so that --check refuses what the run would.
  const models::Profile& profile =
      load_once(loaded.profiles, s.profile.empty() ? cluster.gpu_kind : s.profile,
                profile_node ? *profile_node : cluster_node,
                [](const std::string& r) { return models::load_profile(r); });
  if (cluster.total_gpus() > kMaxGpus)
    cluster_node.fail("expected a cluster of at most " + std::to_string(kMaxGpus) + " GPUs (a study simulates every "
                      "GPU of its cluster), got " + cluster.name + " with " + std::to_string(cluster.total_gpus()) +
                      " (" + std::to_string(cluster.num_nodes) + " nodes x " + std::to_string(cluster.gpus_per_node) +
                      "); simulate a smaller cluster");

  parse_parallelism(node, cluster, s);
  s.workload = parse_workload(node.at("workload"));
  const bool has_trace = parse_trace(node, arch, dir, loaded, s);
  if (!arch.is_moe() && (s.workload.mode == WorkloadMode::kPrefill || s.workload.mode == WorkloadMode::kDecode))
    node.at("workload").at("mode").fail("expected training or synthetic for " + arch.name +
                                        ", a dense model (prefill and decode replay an MoE routing trace), got " +
                                        workload_mode_name(s.workload.mode));

  if (auto pl = node.find("placement")) parse_placement(*pl, arch, has_trace, dir, loaded, s);
  check_ep_against_experts(node, arch, s);
  if (auto ov = node.find("overlap")) parse_overlap(*ov, s);
  if (auto d = node.find("dispatch")) parse_dispatch(*d, s);
  if (s.dispatch == DispatchMode::kLowLatency && !models::has_source(profile.low_latency.provenance))
    dispatch_mode_node(node).fail(
        "expected flat or hierarchical with profile " + profile.name + ", which has no low_latency_kernels section "
        "(the fixed costs of the low-latency kernels), got low_latency; add one (docs/profile-format.md)");
  if (auto n = node.find("network")) parse_network(*n, s);
  if (auto n = node.find("power_cap"))
    s.power_cap = parse_limit(*n, common::UnitKind::kPower, 1.0, 1e5,
                              "a power between 1 W and 100 kW with a unit (e.g. \"450W\"), or none");
  if (auto n = node.find("clock_limit"))
    s.clock_limit = parse_limit(*n, common::UnitKind::kFrequency, 1e6, 1e10,
                                "an SM clock between 1 MHz and 10 GHz with a unit (e.g. \"1410MHz\"), or none");
  if (auto n = node.find("seed")) s.seed = static_cast<std::uint64_t>(n->as_int(0));
  if (auto n = node.find("simgrid")) s.simgrid_cfg = parse_simgrid(*n, loaded);
  return s;
}

// ---------------------------------------------------------------------------------------------------
// Variants

struct Leaf {
  std::string path;  // below base, e.g. "placement.policy"
  YamlNode node;
};

// A map of key paths (dotted keys, nested section maps, or both) as leaves in document order.
std::vector<Leaf> flatten(const YamlNode& map) {
  std::vector<Leaf> out;
  std::map<std::string, std::string> seen;  // path -> where
  auto walk = [&](auto& self, const YamlNode& m, const std::string& prefix) -> void {
    m.expect_map();
    for (const std::string& key : m.keys()) {
      const YamlNode child = m.at(key);
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      if (is_section(path)) {
        if (child.is_map()) {
          self(self, child, path);
          continue;
        }
        std::vector<std::string> inside;
        for (const auto& leaf : scenario_leaves())
          if (leaf.starts_with(path + ".")) inside.push_back(leaf);
        child.fail("expected key paths of values, got the section " + common::quoted(path) +
                   "; name its values instead: " + common::join(inside, ", "));
      }
      if (!is_leaf(path))
        child.fail("unknown key path " + common::quoted(path) + common::did_you_mean(path, scenario_leaves()) +
                   "; valid key paths: " + common::join(scenario_leaves(), ", "));
      if (auto [it, inserted] = seen.emplace(path, child.location()); !inserted)
        child.fail("expected each key path once, got " + path + " again (first at " + it->second + ")");
      out.push_back(Leaf{path, child});
    }
  };
  walk(walk, map, "");
  return out;
}

// A value as text: the scalar itself, or a flow list "[a, b]".
std::string canonical(const YamlNode& value) {
  if (value.is_sequence()) {
    std::vector<std::string> parts;
    for (const YamlNode& item : value.items()) parts.push_back(canonical(item));
    return "[" + common::join(parts, ", ") + "]";
  }
  return value.raw().Scalar();
}

// The shape a value of `path` must have to be assigned; its type and range are checked by parse_scenario.
void check_value_shape(const std::string& path, const YamlNode& value) {
  if (is_list_leaf(path)) {
    for (const YamlNode& item : value.items())
      if (!item.is_scalar()) item.fail_expected("a string");
    return;
  }
  if (!value.is_scalar() || value.raw().Scalar().empty()) value.fail_expected("a single value for " + path);
}

std::string safe_chars(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '+' || c == '-';
    out += ok ? c : '_';
  }
  return out;
}

// The part of a variant name one sweep value contributes: the value with unsafe characters replaced by
// '_'; a number prefixed with its key's last segment; a file path its stem; a list its items joined by '_'.
std::string name_part(const std::string& path, const YamlNode& value) {
  if (value.is_sequence()) {
    std::vector<std::string> parts;
    for (const YamlNode& item : value.items()) parts.push_back(name_part(path, item));
    return parts.empty() ? "none" : common::join(parts, "_");
  }
  std::string text = value.raw().Scalar();
  const bool is_path = path == "trace" || path == "placement.file" ||
                       ((path == "architecture" || path == "cluster" || path == "profile") && looks_like_path(text));
  if (is_path && text != "none" && text != "balanced") text = fs::path(text).stem().string();
  if (text.empty()) return "empty";
  // "4" alone says little in a name: numbers and sizes carry their key ("ep4", "chunks8", "power_cap450W").
  if (!is_path && ((text[0] >= '0' && text[0] <= '9') || text[0] == '-' || text[0] == '+'))
    text = path.substr(path.rfind('.') + 1) + text;
  return safe_chars(text);
}

bool is_safe_name(const std::string& name) {
  return !name.empty() && name.size() <= kMaxVariantName && name.front() != '.' && name.front() != '-' &&
         safe_chars(name) == name;
}

struct Assignment {
  std::string path;
  std::string value;   // canonical text
  std::string source;  // e.g. "sweep.placement.policy[1]"
};

struct VariantSpec {
  std::string name;
  std::vector<std::size_t> index;  // sweep: the value index per dimension; explicit: {variant index}
  std::vector<Assignment> assignments;
};

struct Dimension {
  std::string path;
  std::vector<YamlNode> values;
};

std::vector<Dimension> sweep_dimensions(const YamlNode& sweep) {
  std::vector<Dimension> dims;
  for (Leaf& leaf : flatten(sweep)) {
    if (!leaf.node.is_sequence()) leaf.node.fail_expected("a list of values to sweep (e.g. " + leaf.path + ": [a, b])");
    Dimension d{leaf.path, leaf.node.items()};
    if (d.values.empty()) leaf.node.fail("expected at least one value to sweep, got an empty list");
    std::map<std::string, std::string> seen;
    for (const YamlNode& v : d.values) {
      check_value_shape(d.path, v);
      if (auto [it, inserted] = seen.emplace(canonical(v), v.path()); !inserted)
        v.fail("expected distinct values, got " + common::quoted(canonical(v)) + " again (also " + it->second + ")");
    }
    dims.push_back(std::move(d));
  }
  if (dims.empty()) sweep.fail_expected("at least one key path with a list of values");
  return dims;
}

// The variants of a sweep in nested-loop order (the first dimension varies slowest), named from their
// values; parts (or, rarely, whole names) made equal by the character rule get "_2", "_3", ... in order.
std::vector<VariantSpec> sweep_variants(const YamlNode& sweep, const std::vector<Dimension>& dims) {
  std::size_t total = 1;
  for (const Dimension& d : dims) {
    total *= d.values.size();
    if (total > kMaxVariants)
      sweep.fail("expected at most " + std::to_string(kMaxVariants) +
                 " variants, got more; sweep fewer values or list variants explicitly");
  }
  // Name parts per dimension, made unique within it: two files both called p.yaml give "p" and "p_2".
  std::vector<std::vector<std::string>> parts_of(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d) {
    std::set<std::string> used;
    for (const YamlNode& value : dims[d].values) {
      const std::string stem = name_part(dims[d].path, value);
      std::string part = stem;
      for (int k = 2; !used.insert(part).second; ++k) part = stem + "_" + std::to_string(k);
      parts_of[d].push_back(part);
    }
  }
  std::vector<VariantSpec> out;
  std::set<std::string> names;
  std::vector<std::size_t> index(dims.size(), 0);
  for (std::size_t n = 0; n < total; ++n) {
    VariantSpec v;
    v.index = index;
    std::vector<std::string> parts;
    for (std::size_t d = 0; d < dims.size(); ++d) {
      const YamlNode& value = dims[d].values[index[d]];
      parts.push_back(parts_of[d][index[d]]);
      v.assignments.push_back(Assignment{dims[d].path, canonical(value), value.path()});
    }
    std::string name = common::join(parts, "-");
    if (name.front() == '.' || name.front() == '-') name = "v" + name;
    if (name.size() > kMaxVariantName) name.resize(kMaxVariantName);
    const std::string stem = name;
    for (int k = 2; !names.insert(name).second; ++k) name = stem + "_" + std::to_string(k);
    v.name = name;
    out.push_back(std::move(v));
    for (std::size_t d = dims.size(); d-- > 0;) {
      if (++index[d] < dims[d].values.size()) break;
      index[d] = 0;
    }
  }
  return out;
}

std::vector<VariantSpec> explicit_variants(const YamlNode& list) {
  std::vector<VariantSpec> out;
  std::map<std::string, std::string> seen;
  const std::vector<YamlNode> items = list.items();
  if (items.empty()) list.fail_expected("at least one variant");
  for (std::size_t i = 0; i < items.size(); ++i) {
    const YamlNode& item = items[i];
    item.expect_map();
    item.allow_keys({"name", "set"});
    const YamlNode name_node = item.at("name");
    VariantSpec v;
    v.name = name_node.as_string();
    if (!is_safe_name(v.name))
      name_node.fail_expected(
          "a name safe as a folder name: letters, digits, '.', '_', '+', '-', not starting with "
          "'.' or '-', at most " +
          std::to_string(kMaxVariantName) + " characters");
    if (auto [it, inserted] = seen.emplace(v.name, name_node.location()); !inserted)
      name_node.fail("expected unique variant names, got " + common::quoted(v.name) + " again (first at " + it->second +
                     ")");
    v.index = {i};
    if (auto set = item.find("set")) {
      for (Leaf& leaf : flatten(*set)) {
        check_value_shape(leaf.path, leaf.node);
        v.assignments.push_back(Assignment{leaf.path, canonical(leaf.node), leaf.node.path()});
      }
    }
    out.push_back(std::move(v));
  }
  return out;
}

// Points base's `path` at `value` (maps on the way are created): the value node keeps its own position,
// so an error in it names the sweep or variant entry it came from.
void splice(const YamlNode& map, const std::vector<std::string>& segments, std::size_t i, const YamlNode& value) {
  YAML::Node raw = map.raw();
  if (i + 1 == segments.size()) {
    raw[segments[i]] = value.raw();
    return;
  }
  const std::optional<YamlNode> child = map.find(segments[i]);
  if (child) {
    if (!child->is_map()) child->fail_expected("a map of keys (a variant assigns a value inside it)");
    splice(*child, segments, i + 1, value);
    return;
  }
  raw[segments[i]] = YAML::Node(YAML::NodeType::Map);
  splice(*map.find(segments[i]), segments, i + 1, value);
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1)
    out.push_back(path.substr(start, dot - start));
  out.push_back(path.substr(start));
  return out;
}

// A --set of a base value that a sweep or variant assigns would silently lose: refuse it.
void check_overrides_against(const std::vector<std::string>& overrides, const std::vector<std::string>& assigned,
                             const std::string& where) {
  for (const std::string& o : overrides) {
    const std::string path = o.substr(0, o.find('='));
    if (!path.starts_with("base.")) continue;
    const std::string below = path.substr(5);
    for (const std::string& a : assigned)
      if (a == below || a.starts_with(below + ".") || below.starts_with(a + ".") || below.starts_with(a + "["))
        throw common::UsageError("--set " + o + ": " + a + " is assigned by the study's " + where +
                                 ", which would replace this value in every variant; change the " + where +
                                 " entry instead");
  }
}

}  // namespace

Scenario parse_scenario(const YamlNode& node, const std::string& dir) {
  Loaded loaded;
  return parse_scenario_with(node, fs::absolute(dir), loaded);
}

namespace {

// A double that reads back to the same value.
std::string exact(double v) {
  std::ostringstream ss;
  ss << std::setprecision(17) << v;
  return ss.str();
}

// A string as a double-quoted YAML scalar.
std::string quoted_yaml(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string scenario_to_yaml(const Scenario& s) {
  std::ostringstream y;
  y << "# The resolved scenario this variant ran (every default filled in); moesim reads it back as a study's\n"
       "# base, so `base:` followed by these lines indented is a study of this variant alone.\n";
  y << "architecture: " << quoted_yaml(s.architecture) << "\ncluster: " << quoted_yaml(s.cluster) << "\n";
  if (!s.profile.empty()) y << "profile: " << quoted_yaml(s.profile) << "\n";
  if (s.trace_mix != TraceMix::kOne) {
    const bool phases = s.trace_mix == TraceMix::kPhases;
    y << "trace:\n  " << (phases ? "phases" : "mix") << ":\n";
    for (const TracePart& p : s.trace_parts)
      y << "    - {trace: " << quoted_yaml(p.path) << ", "
        << (phases ? "steps: " + std::to_string(p.steps) : "weight: " + exact(p.weight)) << "}\n";
  } else {
    y << "trace: " << (s.balanced_routing ? std::string("balanced") : s.trace.empty() ? std::string("none")
                                                                                       : quoted_yaml(s.trace)) << "\n";
  }
  y << "parallelism: {tp: " << s.tp << ", ep: " << s.ep << "}\n";
  const Workload& w = s.workload;
  y << "workload:\n  mode: " << workload_mode_name(w.mode) << "\n  steps: " << w.steps << "\n  warmup_steps: "
    << w.warmup_steps << "\n  tokens_per_step: " << w.tokens_per_step << "\n  batch_sequences: " << w.batch_sequences
    << "\n  decode_start: " << (w.decode_staggered ? "staggered" : "aligned")
    << "\n  micro_batches: " << w.micro_batches << "\n  gradient: " << gradient_sync_name(w.gradient)
    << "\n  batch: " << w.batch << "\n  sequence_length: " << w.sequence_length << "\n  synthetic: {compute: "
    << exact(w.synthetic_compute) << "s, a2a_bytes: " << exact(w.synthetic_a2a_bytes)
    << "B, layers: " << w.synthetic_layers << ", overlap: " << (w.synthetic_overlap ? "true" : "false") << "}\n";
  y << "placement: {policy: " << s.placement.policy
    << ", file: " << (s.placement.file.empty() ? std::string("none") : quoted_yaml(s.placement.file))
    << ", replicas: " << s.placement.replicas << ", groups: " << s.placement.groups;
  // Only when on: scenarios without online rebalancing keep their form (and hashes).
  if (const RebalanceOptions& r = s.placement.rebalance; r.every_steps > 0)
    y << ", rebalance: {every_steps: " << r.every_steps << ", window_steps: " << r.window_steps
      << ", migration: " << migration_mode_name(r.migration) << "}";
  y << "}\n";
  y << "overlap: {policy: " << overlap_policy_name(s.overlap.policy) << ", chunks: " << s.overlap.chunks
    << ", timelines: " << timelines_name(s.overlap.timelines) << "}\n";
  y << "dispatch: {mode: " << dispatch_mode_name(s.dispatch)
    << ", sms: " << (s.dispatch_sms < 0 ? std::string("default") : std::to_string(s.dispatch_sms))
    << ", pieces: " << s.dispatch_pieces << "}\n";
  // The tolerance only when not auto (the default): scenarios written before it existed keep their
  // form (and hashes).
  y << "network: {fidelity: " << network_fidelity_name(s.fidelity)
    << (s.network_tolerance != kAutoTolerance ? ", tolerance: " + exact(s.network_tolerance) : std::string()) << "}\n";
  y << "power_cap: " << (s.power_cap > 0 ? exact(s.power_cap) + "W" : "none") << "\n";
  y << "clock_limit: " << (s.clock_limit > 0 ? exact(s.clock_limit) + "Hz" : "none") << "\n";
  y << "seed: " << s.seed << "\nsimgrid: [";
  for (std::size_t i = 0; i < s.simgrid_cfg.size(); ++i) y << (i ? ", " : "") << quoted_yaml(s.simgrid_cfg[i]);
  y << "]\n";
  return y.str();
}

Scenario revalidate_scenario(const Scenario& s, const std::string& what) {
  const common::YamlDocument doc = common::YamlDocument::load_string(scenario_to_yaml(s), what);
  return parse_scenario(doc.root(), fs::current_path().string());
}

Study load_study(const std::string& path, const std::vector<std::string>& overrides) {
  common::YamlDocument doc = common::YamlDocument::load_file(path);
  const std::string text = common::read_file(path);
  doc.apply_overrides(overrides);
  const YamlNode root = doc.root();
  models::check_config_kind(root, "study");
  root.allow_keys(
      {"schema_version", "kind", "name", "description", "base", "sweep", "exclude", "variants", "baseline"});
  models::check_config_header(root, "study");

  Study study;
  study.source_file = fs::absolute(path).lexically_normal().string();
  study.sha256 = doc.content_sha256();
  study.name = fs::path(path).stem().string();
  if (auto n = root.find("name")) study.name = n->as_string();
  if (auto n = root.find("description")) study.description = n->as_string();
  root.at("base").expect_map();
  const fs::path dir = fs::absolute(path).parent_path();

  const std::optional<YamlNode> sweep = root.find("sweep");
  const std::optional<YamlNode> variants = root.find("variants");
  const std::optional<YamlNode> exclude = root.find("exclude");
  if (sweep && variants)
    variants->fail(
        "expected either a sweep or a list of variants, got both; list the sweep's combinations as "
        "variants, or drop the variants");
  if (exclude && !sweep) exclude->fail("expected exclude filters only with a sweep, got them without one");

  std::vector<VariantSpec> specs;
  std::vector<Dimension> dims;
  if (sweep) {
    dims = sweep_dimensions(*sweep);
    specs = sweep_variants(*sweep, dims);
    std::vector<std::string> assigned;
    for (const Dimension& d : dims) assigned.push_back(d.path);
    check_overrides_against(overrides, assigned, "sweep");
  } else if (variants) {
    specs = explicit_variants(*variants);
    std::vector<std::string> assigned;
    for (const VariantSpec& v : specs)
      for (const Assignment& a : v.assignments) assigned.push_back(a.path);
    check_overrides_against(overrides, assigned, "variants");
  } else {
    specs.push_back(VariantSpec{"base", {}, {}});
  }

  // Exclude filters: each names swept key paths and one of their values; a variant matching every
  // entry of one filter is dropped.
  std::map<std::string, std::string> dropped_by;  // variant name -> filter
  if (exclude) {
    std::vector<std::vector<std::pair<std::size_t, std::string>>> filters;  // (dimension, value text)
    for (const YamlNode& filter : exclude->items()) {
      std::vector<std::pair<std::size_t, std::string>> entries;
      const std::vector<Leaf> leaves = flatten(filter);
      if (leaves.empty()) filter.fail_expected("a map of swept key paths to values");
      for (const Leaf& leaf : leaves) {
        auto d = std::find_if(dims.begin(), dims.end(), [&](const Dimension& x) { return x.path == leaf.path; });
        if (d == dims.end()) {
          std::vector<std::string> swept;
          for (const Dimension& x : dims) swept.push_back(x.path);
          leaf.node.fail("expected a swept key path (" + common::join(swept, ", ") + "), got " + leaf.path +
                         ", which the sweep does not vary");
        }
        check_value_shape(leaf.path, leaf.node);
        const std::string value = canonical(leaf.node);
        std::vector<std::string> values;
        for (const YamlNode& v : d->values) values.push_back(canonical(v));
        if (std::find(values.begin(), values.end(), value) == values.end())
          leaf.node.fail("expected one of the sweep's values for " + leaf.path + " (" + common::join(values, ", ") +
                         "), got " + common::quoted(value) + common::did_you_mean(value, values));
        entries.emplace_back(static_cast<std::size_t>(d - dims.begin()), value);
      }
      filters.push_back(std::move(entries));
    }
    std::vector<VariantSpec> kept;
    const std::vector<YamlNode> filter_nodes = exclude->items();
    for (VariantSpec& v : specs) {
      std::optional<std::size_t> match;
      for (std::size_t f = 0; f < filters.size() && !match; ++f) {
        const bool all = std::all_of(filters[f].begin(), filters[f].end(), [&](const auto& entry) {
          return v.assignments[entry.first].value == entry.second;
        });
        if (all) match = f;
      }
      if (match)
        dropped_by.emplace(v.name, filter_nodes[*match].path());
      else
        kept.push_back(std::move(v));
    }
    if (kept.empty()) exclude->fail("expected at least one variant left, got none: the filters drop every variant");
    specs = std::move(kept);
  }

  std::vector<std::string> names;
  for (const VariantSpec& v : specs) names.push_back(v.name);
  study.baseline = names.front();
  if (auto b = root.find("baseline")) {
    const std::string name = b->as_string();
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      if (auto it = dropped_by.find(name); it != dropped_by.end())
        b->fail("expected a variant that is run, got " + common::quoted(name) + ", which " + it->second + " drops");
      b->fail("expected the name of a variant, got " + common::quoted(name) + common::did_you_mean(name, names) +
              "; variants: " + common::join(names, ", "));
    }
    study.baseline = name;
  }

  // Each variant: the study file again (with --set), its values pointed into `base`, then validated.
  Loaded loaded;
  for (const VariantSpec& spec : specs) {
    common::YamlDocument vdoc = common::YamlDocument::load_string(text, path);
    vdoc.apply_overrides(overrides);
    const YamlNode vroot = vdoc.root();
    const YamlNode base = vroot.at("base");
    std::vector<YamlNode> values;
    if (sweep) {
      const std::vector<Dimension> vdims = sweep_dimensions(vroot.at("sweep"));
      for (std::size_t d = 0; d < vdims.size(); ++d) values.push_back(vdims[d].values[spec.index[d]]);
    } else if (variants) {
      if (auto set = vroot.at("variants").items()[spec.index[0]].find("set"))
        for (const Leaf& leaf : flatten(*set)) values.push_back(leaf.node);
    }
    for (std::size_t a = 0; a < spec.assignments.size(); ++a)
      splice(base, split_path(spec.assignments[a].path), 0, values[a]);

    Variant v;
    v.name = spec.name;
    std::vector<std::string> made_of;
    for (const Assignment& a : spec.assignments) {
      v.assignments.emplace_back(a.path, a.value);
      made_of.push_back(a.source + " = " + a.value);
    }
    try {
      v.scenario = parse_scenario_with(base, dir, loaded);
    } catch (const InputError& e) {
      if (spec.assignments.empty()) throw;
      throw InputError(std::string(e.what()) + " (in variant " + common::quoted(spec.name) + ", made of " +
                       common::join(made_of, ", ") + ")");
    }
    study.variants.push_back(std::move(v));
  }
  return study;
}

void add_simgrid_settings(Study& study, const std::vector<std::string>& settings) {
  for (std::string s : settings) {
    const std::string given = s;
    if (s.starts_with("--cfg=")) s = s.substr(6);
    if (!valid_simgrid_setting(s))
      throw common::UsageError("--cfg " + given +
                               ": expected a SimGrid setting \"name:value\" (e.g. --cfg network/model:CM02)");
    if (const std::string problem = simgrid_setting_problem(s); !problem.empty())
      throw common::UsageError("--cfg " + common::quoted(given, 200) + ": SimGrid refuses it: " +
                               problem.substr(0, 300));
    for (auto& v : study.variants) v.scenario.simgrid_cfg.push_back(s);
  }
}

}  // namespace moesim::sim
