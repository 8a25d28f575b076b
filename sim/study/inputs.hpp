// A variant's inputs, loaded once from its validated scenario (parse_scenario checked every
// combination): the architecture, cluster and profile, the placement (a file, or solved by its
// policy, through the study's placement cache when there is one), and the trace's hash.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "models/profile.hpp"
#include "sim/engine/step_source.hpp"
#include "sim/placement/placement.hpp"
#include "sim/placement/routing_counts.hpp"
#include "sim/study/study_file.hpp"
#include "traces/load_trace.hpp"

namespace moesim::sim {

struct VariantInputs {
  models::Architecture arch;
  models::Cluster cluster;
  models::Profile profile;
  Placement placement;
  bool has_placement = false;
  int ep = 1;
  int tp = 1;
  std::string trace_sha256;    // "" until hashed (see run_variant)
  std::string placement_file;  // the cached placement file, with a placement cache
  bool placement_solved = false;
};

// Prefill, decode and MoE training replay a trace; dense training and synthetic workloads need none.
bool needs_trace(const Scenario& s, const models::Architecture& arch);

// `placement_cache`: a folder of solved placements: a policy placement is solved once per distinct
// input (policy, replicas, groups, seed, architecture, cluster, ep, tp, trace SHA-256) into
// FOLDER/<policy>-<short hash>.yaml and read back from there; "" = solve in memory.
VariantInputs load_inputs(const Scenario& s, const std::string& placement_cache);

// The SHA-256 of a trace file, computed once per process per (path, size, modification time).
std::string cached_sha256(const std::string& path);

// The step source a scenario's workload draws its batches from (prefill and MoE training: steps of
// tokens_per_step tokens; decode: batch_sequences sequences).
// The scenario's placement policy solved on `routing` (online rebalancing's windows), checked
// against the architecture.
Placement solve_on_routing(const Scenario& s, const VariantInputs& in, const RoutingCounts& routing);

// What a scenario's step source reads, held while it runs.
struct SourceReaders {
  std::vector<std::unique_ptr<traces::TraceReader>> traces;
  std::vector<std::unique_ptr<traces::LoadTraceReader>> loads;  // load-only traces
};

// The scenario's step source over its trace or traces (phases and mixes: docs/study-format.md; a
// load-only trace replays its counts, make_load_source), with `readers` holding what it reads; null
// when the scenario replays no trace.
std::unique_ptr<StepSource> make_scenario_source(const Scenario& s, const VariantInputs& in, SourceReaders& readers);

std::unique_ptr<StepSource> make_source(const Scenario& s, traces::TraceReader& reader, int dp);

}  // namespace moesim::sim
