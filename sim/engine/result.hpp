// What one simulation reports (docs/simulator.md, "Results"): step latencies, per-layer tails,
// per-GPU energy and busy time, the traffic matrix and the first steps' timeline. Times in s, energy
// in J, power in W, traffic in bytes. JSON for the hand-over from a child process and result files;
// the timeline as Chrome-trace JSON (Perfetto opens it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moesim::sim {

struct LayerResult {
  int layer = 0;  // decoder-layer index (synthetic: layer number)
  bool moe = false;
  int chunks = 1;
  // Means over measured steps of, per GPU, the time spent computing routed experts (token processing)
  // and the time with an all-to-all transfer of this layer in flight (all-to-all): max over GPUs
  // (tail) and mean over GPUs (avg), as MoETuner reports them.
  double token_tail = 0.0, token_avg = 0.0;
  double a2a_tail = 0.0, a2a_avg = 0.0;
  // Mean over measured steps of the layer's span: its first task's start to its last task's end,
  // over all GPUs (computes and transfers).
  double span = 0.0;
  std::vector<double> rank_tokens;  // mean tokens processed per EP rank per step
};

struct GpuResult {
  double energy = 0.0;         // J over the measured steps
  double compute_busy = 0.0;   // s
  double comm_busy = 0.0;      // s with any transfer in flight
  double both_busy = 0.0;      // s computing while communicating
  double peak_power = 0.0;     // W, highest state power visited
};

// One event of the Chrome-trace timeline: a compute task or a stream operation on a GPU, or a change of
// a GPU's power. Kept as plain values while simulating (no JSON until the file is written: the
// timeline's first steps would otherwise allocate a JSON object per event in the engine's thread).
inline constexpr std::uint8_t kPowerStream = 3;      // TimelineEvent::stream of a power sample
inline constexpr std::uint8_t kPowerCategory = 0xff;  // and its category: no task's
struct TimelineEvent {
  std::uint8_t category = 0;  // timeline_category_name(category): "experts", "dispatch", ...
  // 0 compute, 1 communication (dispatch, collectives), 2 combine, kPowerStream a power sample
  std::uint8_t stream = 0;
  std::int32_t layer = -1;    // decoder layer (synthetic: layer number), -1 for none
  std::int32_t gpu = 0;
  std::int32_t step = 0;      // step index, warmup steps included
  double begin = 0.0, end = 0.0;  // s; a power sample: begin = end = when the power changed
  // A stream operation: payload bytes of the transfers this GPU sent in it (0 for computes).
  double bytes = 0.0;
  // A task of an MoE layer: tokens routed to this GPU's EP rank in that layer this step; any other
  // task: the tokens the step processes.
  double tokens = 0.0;
  double watts = 0.0;  // a power sample: W the GPU draws from `begin` on (the power model's value)
  bool operator==(const TimelineEvent&) const = default;
};
const char* timeline_category_name(int category);

// What the Chrome trace says about where it comes from: the variant's name and its timeline's label.
struct TraceInfo {
  std::string variant;
  std::string timeline;
};
// Events the trace holds at most: whole steps are kept while they fit (the first step always); the
// rest are left out and counted in the file's otherData.
inline constexpr std::size_t kMaxTraceEvents = 250000;
// The Chrome-trace JSON of a timeline (Perfetto and chrome://tracing open it; docs/report.md,
// "Timeline trace"): one complete event per slice, named "<category> L<layer>" with bytes and tokens
// in its args; a power counter per GPU; flows dispatch -> experts -> combine per GPU and MoE layer;
// process and thread names carrying the variant and the GPU, for `gpus` GPUs.
std::string chrome_trace_json(const std::vector<TimelineEvent>& events, std::size_t gpus, const TraceInfo& info = {});
// One step of a timeline for the report's timeline chart: the first recorded step, per GPU (at most
// kStepActivityGpus) its compute and communication busy intervals, s from the step's first event,
// merged where they touch: {"step", "span_s", "gpus_total", "gpus": [{"compute": [[b, e], ...],
// "comm": [[b, e], ...]}]}. Null when the timeline recorded no event.
inline constexpr std::size_t kStepActivityGpus = 16;
nlohmann::json step_activity_json(const std::vector<TimelineEvent>& events, std::size_t gpus);

// One online rebalance of a simulated measured step (docs/simulator.md, "Online rebalancing").
struct RebalanceEvent {
  int step = 0;            // the step it came before (warmup steps included)
  int experts_moved = 0;   // expert copies that arrived on a rank that did not hold them
  double bytes = 0.0;      // their weights, bytes moved over the links
  double seconds = 0.0;    // the first moving byte's start to the last one's arrival (0: none moved)
  double step_latency = 0.0;  // s, the step it came before, migration included
  bool operator==(const RebalanceEvent&) const = default;
};

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
  // Flows that each stood for several transfers (network fidelity "auto": an aggregated uniform
  // all-to-all, docs/simulator.md); 0: every transfer ran as its own flow.
  std::uint64_t aggregated_flows = 0;
  // Transfers moved by the engine's fluid network (network fidelity "auto"); 0: by SimGrid's flows.
  std::uint64_t fluid_flows = 0;
  // Activities that each moved one GPU's part of a flat or low-latency all-to-all phase through its
  // own ports (network fidelity "ports", docs/simulator.md "Port phases"); 0: none.
  std::uint64_t port_activities = 0;
  // The fluid network's tolerance as it ran (network.tolerance, auto resolved); 0 exact or unused.
  double network_tolerance = 0.0;
  bool trace_repeated = false;
  double wall_seconds = 0.0;
  std::vector<TimelineEvent> timeline;  // the first timeline_steps measured steps
  std::vector<RebalanceEvent> rebalances;  // in measured steps, in step order
  // Measured steps: token sends (dispatch and combine, StepGraph::token_sends) and the (token, MoE
  // layer) pairs routed; residence dispatch: the largest replicated context a GPU held, bytes.
  std::uint64_t token_sends = 0;
  std::uint64_t token_layers = 0;
  double context_bytes = 0.0;
  // Residence dispatch, measured steps: the size of the coherence all-gathers (each one's gathered
  // bytes, summed over its TP-index groups).
  double coherence_bytes = 0.0;
  // Measured steps: the dispatch and combine payload that crossed between nodes (tokens' hidden states
  // and partial outputs, as routed; port phases, which move no transfer per GPU pair, leave it 0).
  double token_inter_node_bytes = 0.0;
};

// Everything but the timeline (which travels from the child as raw events and is written as its
// own file, see chrome_trace_json).
nlohmann::json to_json(const SimResult& r);
SimResult sim_result_from_json(const nlohmann::json& j);

}  // namespace moesim::sim
