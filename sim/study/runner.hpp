// Runs one variant of a study (docs/study-format.md): loads its inputs, maps its overlap policy onto
// the engine (sim/study/overlap.hpp), simulates every timeline in step ranges, each in its own child
// process, in parallel, and summarises the requested timeline. Deterministic: the same inputs give
// the same result whatever the number of processes.
#pragma once

#include <functional>
#include <string>

#include "sim/study/results.hpp"
#include "sim/study/study_file.hpp"

namespace moesim::sim {

struct RunOptions {
  std::string dump_activities;  // the requested timeline's activities go to this file ("" = none)
  // A folder of solved placements (sim/study/inputs.hpp, load_inputs); "" = solve in memory.
  std::string placement_cache;
};

// Runs one variant. `progress` is told each finished timeline.
VariantResult run_variant(const Variant& variant, const std::function<void(const std::string&)>& progress = {},
                          const RunOptions& options = {});

// The summary of a requested timeline, with the others for the sequential/overlapped/ideal columns.
VariantSummary summarise(const std::vector<SimResult>& timelines, WorkloadMode mode);
// Online rebalancing's totals over `r`'s measured steps into `sum` (VariantSummary::rebalances, ...).
void summarise_rebalances(const SimResult& r, VariantSummary& sum);
// The variant's "traffic" figures (VariantSummary::sends_per_token_layer ...), GPU g on node g / gpus_per_node.
void summarise_traffic(const SimResult& r, int gpus_per_node, VariantSummary& sum);

// CPUs this process may run on (its affinity mask: taskset, cpusets), else the hardware threads.
int usable_cpus();
// Simulations run at once: $MOESIM_JOBS (1..kMaxJobs; anything else is a UsageError), else usable_cpus().
constexpr int kMaxJobs = 4096;
int parallel_jobs();
// Build step graphs on a worker thread while the engine runs (EngineOptions::build_ahead), with
// `processes` simulations at once: $MOESIM_BUILD_AHEAD (0 = off, else on), else on where there is
// a spare CPU for each simulation's builder (2 x processes <= usable_cpus()).
bool build_ahead(int processes);

}  // namespace moesim::sim
