// One simulation: a workload replayed on a cluster's SimGrid platform under one overlap schedule
// (docs/simulator.md). Each step becomes a graph of compute tasks (SimGrid Execs on the GPU's host,
// in stream order) and transfers (SimGrid Comms between GPU hosts) started lazily as their
// predecessors complete. Contention lives in the engine: while a transfer touches a GPU that is
// computing, that GPU's compute runs at the profile's slowed rate (host pstate) and its ports carry
// the slowed bandwidth, and both recover the moment the overlap ends.
// simulate() creates a SimGrid engine: call it once per process (run_isolated() forks for that).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "models/profile.hpp"
#include "sim/placement.hpp"
#include "sim/study.hpp"
#include "sim/workload.hpp"

namespace moesim::sim {

struct SimOptions {
  std::vector<int> layer_chunks;  // per decoder layer: chunks of its MoE all-to-all (1 = sequential)
  bool contention = true;         // false: the ideal timeline
  DispatchMode dispatch = DispatchMode::kFlat;
  double power_cap = 0.0;         // W, 0 = none
  double clock_limit = 0.0;       // Hz, SM clock limit, 0 = none
  int steps = 1;                  // measured steps
  int warmup_steps = 0;           // simulated first, not measured
  // Simulate only the steps [first_step, end_step) of the warmup + measured sequence (end_step -1:
  // to the end); the steps before first_step are drawn from the source and not simulated. Steps
  // meet at a barrier with every GPU idle, so a range starting later is the same simulation shifted
  // in time (docs/simulator.md, "Steps in parallel").
  int first_step = 0;
  int end_step = -1;
  int timeline_steps = 0;         // steps recorded in the Chrome-trace timeline (0 = none)
  std::vector<std::string> simgrid_cfg;
  std::string label;              // "overlapped", "ideal", ... for reports
  std::string dump_activities;    // write every task to this file for moesim-replay ("" = off)
  // Run a synthetic uniform all-to-all as one flow per GPU where that is exact (docs/simulator.md,
  // "Aggregated uniform all-to-all"); false runs every (source, destination) flow (tests compare).
  bool merge_uniform_all_to_all = true;
  // Build each step's graph (drawing its batch from the trace, routing its tokens) on a worker
  // thread while the engine runs the step before it (docs/simulator.md, "Building ahead"). The
  // graphs are the same either way; false builds each step in the engine's thread when it starts.
  bool build_ahead = true;
};

struct SimInput {
  const models::Architecture* arch = nullptr;
  const models::Cluster* cluster = nullptr;
  const models::Profile* profile = nullptr;
  const Placement* placement = nullptr;  // MoE workloads
  int tp = 1;
  int ep = 1;
  const Workload* workload = nullptr;
  StepSource* steps = nullptr;  // prefill/decode
  SimOptions options;
};

struct LayerResult {
  int layer = 0;  // decoder-layer index (synthetic: layer number)
  bool moe = false;
  int chunks = 1;
  // Means over measured steps of, per GPU, the time spent computing routed experts (token processing)
  // and the time with an all-to-all transfer of this layer in flight (all-to-all): max over GPUs
  // (tail) and mean over GPUs (avg), as MoETuner reports them.
  double token_tail = 0.0, token_avg = 0.0;
  double a2a_tail = 0.0, a2a_avg = 0.0;
  std::vector<double> rank_tokens;  // mean tokens processed per EP rank per step
};

struct GpuResult {
  double energy = 0.0;         // J over the measured steps
  double compute_busy = 0.0;   // s
  double comm_busy = 0.0;      // s with any transfer in flight
  double both_busy = 0.0;      // s computing while communicating
  double peak_power = 0.0;     // W, highest state power visited
};

// One event of the Chrome-trace timeline: a compute task or a stream operation on a GPU. Kept as
// plain values while simulating (no JSON until the file is written: the timeline's first steps
// would otherwise allocate a JSON object per event in the engine's thread).
struct TimelineEvent {
  std::uint8_t category = 0;  // timeline_category_name(category): "experts", "dispatch", ...
  std::uint8_t stream = 0;    // 0 compute, 1 communication
  std::int32_t layer = -1;    // decoder layer (synthetic: layer number), -1 for none
  std::int32_t gpu = 0;
  std::int32_t step = 0;      // step index, warmup steps included
  double begin = 0.0, end = 0.0;  // s
  bool operator==(const TimelineEvent&) const = default;
};
const char* timeline_category_name(int category);
// The Chrome-trace JSON of a timeline (Perfetto opens it): one complete event per TimelineEvent, named
// "<category> L<layer>", then the process and thread names of `gpus` GPUs.
std::string chrome_trace_json(const std::vector<TimelineEvent>& events, std::size_t gpus);

struct SimResult {
  std::string label;
  std::vector<double> step_latency;  // s, measured steps
  std::vector<LayerResult> layers;
  std::vector<GpuResult> gpus;
  std::vector<std::vector<double>> traffic;  // bytes [src GPU][dst GPU], measured steps
  double measured_time = 0.0;    // s, sum of measured step latencies
  double compute_actual = 0.0;   // s, summed over compute tasks of measured steps, as simulated
  double compute_alone = 0.0;    // s, the same tasks without contention
  std::uint64_t tokens = 0;      // tokens in measured steps
  std::uint64_t activities = 0;  // SimGrid activities started (all steps)
  bool trace_repeated = false;
  double wall_seconds = 0.0;
  std::vector<TimelineEvent> timeline;  // the first timeline_steps measured steps
};

SimResult simulate(const SimInput& input);

// The step ranges one simulation is split into (each simulated in its own process, in parallel):
// a fixed function of the step counts, never of the machine, so results are the same everywhere.
// The first range also holds the warmup steps and the timeline's steps.
struct StepRange {
  int first = 0, end = 0;  // [first, end) of the warmup + measured sequence
};
std::vector<StepRange> step_ranges(int warmup_steps, int steps);
// One result from the results of consecutive step ranges, in order: step latencies and the
// timeline concatenated, totals summed, per-step means weighted by measured steps, peaks maxed.
SimResult merge_step_ranges(const std::vector<SimResult>& parts);
// Runs `fn` in a forked child (one SimGrid engine per process) and returns its result; a child that
// fails reports its error message, rethrown here as the same error class.
SimResult run_isolated(const std::function<SimResult()>& fn);
// Runs several in parallel, at most `jobs` children at once; results in the order of `fns`. The
// first failure is rethrown after every started child has ended. `meanwhile`, when given, runs once
// in this process while the first children simulate (work the results need but the children do
// not, such as hashing an input); its error is rethrown the same way.
std::vector<SimResult> run_isolated_all(const std::vector<std::function<SimResult()>>& fns, int jobs,
                                        const std::function<void()>& meanwhile = {});

// Everything but the timeline (which travels from the child as raw events and is written as its
// own file, see chrome_trace_json).
nlohmann::json to_json(const SimResult& r);
SimResult sim_result_from_json(const nlohmann::json& j);

}  // namespace moesim::sim
