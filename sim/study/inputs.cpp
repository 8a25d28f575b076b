#include "sim/study/inputs.hpp"

#include <filesystem>
#include <map>

#include "common/error.hpp"
#include "common/folder_lock.hpp"
#include "common/hash.hpp"
#include "sim/placement/policy.hpp"
#include "sim/placement/routing_counts.hpp"
#include "sim/engine/load_source.hpp"
#include "traces/cached_reader.hpp"
#include "traces/trace.hpp"

namespace moesim::sim {

namespace fs = std::filesystem;

namespace {

// What a solved placement depends on; equal keys give equal placements (policies are deterministic).
nlohmann::json placement_cache_key(const Scenario& s, const VariantInputs& in) {
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
  // Only where it changes what a policy reads, so that earlier caches stay valid.
  if (s.dispatch == DispatchMode::kResidence) key["residence"] = true;
  // A policy that reads no routing (contiguous, round_robin) gives the same placement for any trace.
  if (!in.trace_sha256.empty()) key["trace_sha256"] = in.trace_sha256;
  // A mix is solved on all its traces, by weight.
  if (!in.trace_sha256.empty() && s.trace_mix == TraceMix::kMix) {
    nlohmann::json mix = nlohmann::json::array();
    for (const TracePart& p : s.trace_parts) mix.push_back({{"sha256", cached_sha256(p.path)}, {"weight", p.weight}});
    key["trace_mix"] = std::move(mix);
  }
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

Placement solve_with(const Scenario& s, const VariantInputs& in, const PlacementPolicy& policy,
                     const RoutingCounts* routing) {
  PlacementOptions opts;
  opts.replicas = s.placement.replicas;
  opts.groups = s.placement.groups;
  opts.seed = s.seed;
  // Residence dispatch: affinity counted from the layer's owner (moetuner's stage 2, exflow).
  opts.residence = s.dispatch == DispatchMode::kResidence;
  PlacementInput pin{in.arch, in.cluster, in.ep, in.tp, policy.needs_routing() ? routing : nullptr, opts};
  Placement p = policy.place(pin);
  validate_placement(p, in.arch, "placement policy " + s.placement.policy);
  return p;
}

// A policy's placement for the scenario, solved in memory: on its trace (phases: the first phase's,
// what is known before serving starts; a mix: the weighted mix of its traces' routing, mix_routing).
Placement solve_placement(const Scenario& s, const VariantInputs& in, const PlacementPolicy& policy) {
  RoutingCounts routing;
  if (policy.needs_routing() && s.trace_mix == TraceMix::kMix) {
    std::vector<RoutingCounts> parts;
    std::vector<double> weights;
    for (const TracePart& p : s.trace_parts) {
      auto r = traces::open_trace(p.path);
      parts.push_back(count_routing(*r, cached_sha256(p.path)));
      weights.push_back(p.weight);
    }
    routing = mix_routing(parts, weights);
  } else if (policy.needs_routing() && traces::is_load_trace(s.trace)) {
    auto r = traces::open_load_trace(s.trace);
    routing = count_load_routing(*r, in.trace_sha256);
  } else if (policy.needs_routing()) {
    auto r = traces::open_trace(s.trace);
    routing = count_routing(*r, in.trace_sha256);
  }
  return solve_with(s, in, policy, &routing);
}

// The placement through the cache folder: solved into it when absent, always read back from it, so
// that every variant runs the placement as the file holds it.
void cached_placement(const Scenario& s, VariantInputs& in, const PlacementPolicy& policy, const std::string& cache) {
  const nlohmann::json key = placement_cache_key(s, in);
  const fs::path file = fs::path(cache) / (s.placement.policy + "-" + common::sha256_hex(key.dump()).substr(0, 12) + ".yaml");
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    fs::create_directories(file.parent_path(), ec);
    if (ec) throw common::RunError("cannot create " + file.parent_path().string() + ": " + ec.message());
    // Shards sharing the folder (--placements) solve each key once: the others wait, then read it.
    const common::WaitingLock solving(fs::path(file.string() + ".lock"));
    if (!fs::exists(file, ec)) {
      Placement p = solve_placement(s, in, policy);
      p.report = without_wall_times(p.report);
      p.report["cache_key"] = key;
      save_placement(p, file.string(), true);
      in.placement_solved = true;
    }
  }
  in.placement = load_placement(file.string());
  const std::string stale = "; delete the file and run again to solve it afresh";
  if (!in.placement.report.contains("cache_key") || in.placement.report["cache_key"] != key)
    throw common::InputError(file.string() + ": this cached placement was solved for other inputs than this variant's (" +
                             key.dump() + ")" + stale);
  validate_placement(in.placement, in.arch, file.string());
  if (in.placement.ep != in.ep || in.placement.tp != in.tp)
    throw common::InputError(file.string() + ": the cached placement is for ep " + std::to_string(in.placement.ep) +
                             ", tp " + std::to_string(in.placement.tp) + ", the scenario runs ep " +
                             std::to_string(in.ep) + ", tp " + std::to_string(in.tp) + stale);
  in.placement_file = file.string();
}

}  // namespace

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

bool needs_trace(const Scenario& s, const models::Architecture& arch) {
  if (s.workload.mode == WorkloadMode::kSynthetic) return false;
  if (s.workload.mode == WorkloadMode::kTraining) return arch.is_moe();
  return true;
}

VariantInputs load_inputs(const Scenario& s, const std::string& placement_cache) {
  VariantInputs in;
  in.arch = models::load_architecture(s.architecture);
  in.cluster = models::load_cluster(s.cluster);
  in.profile = models::load_profile(s.profile.empty() ? in.cluster.gpu_kind : s.profile);
  in.tp = s.tp;
  in.ep = s.ep > 0 ? s.ep : in.cluster.total_gpus() / std::max(1, s.tp);
  if (!needs_trace(s, in.arch)) return in;
  in.has_placement = true;
  if (!s.placement.file.empty()) {
    // parse_scenario checked it against the architecture and the parallelism.
    in.placement = load_placement(s.placement.file);
    return in;
  }
  const auto registry = default_placement_registry();
  const auto policy = registry.create(s.placement.policy);
  // The trace's hash keys a placement solved on its routing; for the results alone it is computed
  // while the simulations run (run_variant).
  if (policy->needs_routing()) in.trace_sha256 = cached_sha256(s.trace);
  if (placement_cache.empty())
    in.placement = solve_placement(s, in, *policy);
  else
    cached_placement(s, in, *policy, placement_cache);
  return in;
}

Placement solve_on_routing(const Scenario& s, const VariantInputs& in, const RoutingCounts& routing) {
  const auto policy = default_placement_registry().create(s.placement.policy);
  return solve_with(s, in, *policy, &routing);
}

std::unique_ptr<StepSource> make_scenario_source(const Scenario& s, const VariantInputs& in, SourceReaders& readers) {
  readers.traces.clear();
  readers.loads.clear();
  if (s.balanced_routing) {
    const traces::TraceShape shape = in.arch.trace_shape();
    readers.traces.push_back(make_sequence_reader(shape, s.workload.sequence_length));
    return make_balanced_source(make_source(s, *readers.traces.back(), in.ep), shape, s.seed);
  }
  if (!needs_trace(s, in.arch)) return nullptr;
  auto open = [&](const std::string& path) -> traces::TraceReader& {
    readers.traces.push_back(std::make_unique<traces::CachingTraceReader>(traces::open_trace(path)));
    return *readers.traces.back();
  };
  // A per-token trace's sequences, or a load-only trace's counts.
  auto source_of = [&](const std::string& path) {
    if (!traces::is_load_trace(path)) return make_source(s, open(path), in.ep);
    readers.loads.push_back(traces::open_load_trace(path));
    return make_load_source(*readers.loads.back(), s.workload.mode == WorkloadMode::kDecode, in.ep,
                            s.workload.sequence_length, s.seed);
  };
  switch (s.trace_mix) {
    case TraceMix::kOne:
      return source_of(s.trace);
    case TraceMix::kPhases: {
      std::vector<SourcePhase> phases;
      for (const TracePart& p : s.trace_parts) phases.push_back({source_of(p.path), p.steps});
      return make_phased_source(std::move(phases));
    }
    case TraceMix::kMix: {
      std::vector<traces::TraceReader*> all;
      std::vector<double> weights;
      for (const TracePart& p : s.trace_parts) {
        all.push_back(&open(p.path));
        weights.push_back(p.weight);
      }
      auto feed = make_mixed_feed(all, weights, s.seed);
      if (s.workload.mode == WorkloadMode::kDecode)
        return make_decode_source(std::move(feed), in.ep, s.workload.batch_sequences, s.workload.decode_staggered);
      return make_prefill_source(std::move(feed), in.ep, s.workload.tokens_per_step);
    }
  }
  return nullptr;
}

std::unique_ptr<StepSource> make_source(const Scenario& s, traces::TraceReader& reader, int dp) {
  if (s.workload.mode == WorkloadMode::kDecode) return make_decode_source(reader, dp, s.workload.batch_sequences, s.workload.decode_staggered);
  return make_prefill_source(reader, dp, s.workload.tokens_per_step);
}

}  // namespace moesim::sim
