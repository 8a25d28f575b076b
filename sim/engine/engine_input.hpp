// What the engine simulates, in its own terms (docs/simulator.md): the workload kind and shape, how
// dispatch is routed, and the mechanisms of one simulation (chunks per layer, contention on or off,
// power cap, step range). The study room maps a study file onto these; nothing here knows of it.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "common/enum_table.hpp"

namespace moesim::models {
struct Architecture;
struct Cluster;
struct Profile;
}  // namespace moesim::models

namespace moesim::sim {

struct Placement;
struct RoutingCounts;
class StepSource;

enum class WorkloadMode { kPrefill, kDecode, kTraining, kSynthetic };
// kResidence: ExFlow's context-coherent dispatch (docs/simulator.md, "Residence dispatch"): a token
// stays on the rank that ran its experts (routing_rule.hpp, owner_rank) and the next layer's attention
// runs there; every GPU holds the context of every sequence, kept coherent by an all-gather.
enum class DispatchMode { kFlat, kHierarchical, kLowLatency, kResidence };
enum class GradientSync { kAllReduce, kFsdp };
// How the network is simulated (docs/simulator.md, "Network fidelity"): kAuto lets the engine take
// its faster paths (the aggregated uniform all-to-all where it is exact, else the fluid network);
// kFluid moves every transfer in the fluid network, none aggregated; kFlow runs every transfer as its
// own SimGrid flow, the reference the others are checked against; kPorts moves every flat or
// low-latency all-to-all phase as one activity per GPU over its own ports (docs/simulator.md, "Port
// phases"), a model whose error is stated there, and everything else in the fluid network.
enum class NetworkFidelity { kAuto, kFluid, kFlow, kPorts };
// How an online rebalance moves expert weights (docs/simulator.md, "Online rebalancing"): kBlocking
// stops inference until every moved expert has arrived, then the step runs on the new placement;
// kBackground moves them while the step runs on the old placement, competing for the same links, and
// the new placement serves from the next step; kFree moves nothing (the bound on what rebalancing
// can gain when moving weights costs nothing).
enum class MigrationMode { kBlocking, kBackground, kFree };

inline constexpr std::array<common::EnumName<WorkloadMode>, 4> kWorkloadModes{
    {{WorkloadMode::kPrefill, "prefill"},
     {WorkloadMode::kDecode, "decode"},
     {WorkloadMode::kTraining, "training"},
     {WorkloadMode::kSynthetic, "synthetic"}}};
inline constexpr std::array<common::EnumName<DispatchMode>, 4> kDispatchModes{{{DispatchMode::kFlat, "flat"},
                                                                               {DispatchMode::kHierarchical, "hierarchical"},
                                                                               {DispatchMode::kLowLatency, "low_latency"},
                                                                               {DispatchMode::kResidence, "residence"}}};
inline constexpr std::array<common::EnumName<GradientSync>, 2> kGradientSyncs{
    {{GradientSync::kAllReduce, "all_reduce"}, {GradientSync::kFsdp, "fsdp"}}};

inline constexpr std::array<common::EnumName<NetworkFidelity>, 4> kNetworkFidelities{
    {{NetworkFidelity::kAuto, "auto"},
     {NetworkFidelity::kFluid, "fluid"},
     {NetworkFidelity::kFlow, "flow"},
     {NetworkFidelity::kPorts, "ports"}}};

inline constexpr std::array<common::EnumName<MigrationMode>, 3> kMigrationModes{
    {{MigrationMode::kBlocking, "blocking"}, {MigrationMode::kBackground, "background"}, {MigrationMode::kFree, "free"}}};

inline std::string migration_mode_name(MigrationMode m) { return common::enum_name<MigrationMode>(kMigrationModes, m); }
inline std::string workload_mode_name(WorkloadMode m) { return common::enum_name<WorkloadMode>(kWorkloadModes, m); }
inline std::string dispatch_mode_name(DispatchMode m) { return common::enum_name<DispatchMode>(kDispatchModes, m); }
inline std::string gradient_sync_name(GradientSync g) { return common::enum_name<GradientSync>(kGradientSyncs, g); }
inline std::string network_fidelity_name(NetworkFidelity f) {
  return common::enum_name<NetworkFidelity>(kNetworkFidelities, f);
}

struct Workload {
  WorkloadMode mode = WorkloadMode::kDecode;
  long tokens_per_step = 4096;  // prefill, training: tokens per step (micro-batch)
  int batch_sequences = 64;     // decode: sequences active at once
  // decode: the first batch_sequences sequences start at staggered positions (steady state of a
  // serving batch); false: every sequence from its first token (a batch of fresh requests).
  bool decode_staggered = true;
  int steps = 100;              // measured steps
  int warmup_steps = 0;         // simulated but not counted
  // training
  int micro_batches = 1;
  GradientSync gradient = GradientSync::kAllReduce;
  // dense training (no trace): sequences of `sequence_length` tokens, `batch` sequences per GPU
  int batch = 8;
  long sequence_length = 2048;
  // synthetic: per layer compute, all-to-all, compute, all-to-all, strictly in sequence
  double synthetic_compute = 300e-6;       // s per compute phase
  double synthetic_a2a_bytes = 8388608.0;  // bytes per GPU per all-to-all, split evenly over GPUs
  int synthetic_layers = 58;
  // false: compute, all-to-all, compute, all-to-all strictly in sequence; true: each all-to-all runs
  // concurrently with the compute phase before it (a fully overlapped pattern).
  bool synthetic_overlap = false;
  bool operator==(const Workload&) const = default;
};

// Online rebalancing (docs/simulator.md, "Online rebalancing"): before step i (warmup steps
// included), i > 0 a multiple of every_steps, the placement is solved again (EngineInput::resolve)
// from the routing of steps [i - window_steps, i), and the experts whose holders change are moved.
// every_steps 0: never (a static placement); window_steps 0: every_steps, or the whole run if shorter.
struct RebalanceOptions {
  int every_steps = 0;
  int window_steps = 0;
  MigrationMode migration = MigrationMode::kBlocking;
  bool operator==(const RebalanceOptions&) const = default;
};

struct EngineOptions {
  std::vector<int> layer_chunks;  // per decoder layer: chunks of its MoE all-to-all (1 = sequential)
  // 2: two-batch overlap (prefill and decode): the step's tokens in two micro-batches, one's attention,
  // shared experts and dense parts under the other's dispatch and combine; 1: one batch.
  int micro_batches = 1;
  // SMs the dispatch and combine kernels hold (contention): -1 the profile's (NCCL's channels); 0 a
  // copy engine or RDMA that takes none (DeepEP's low-latency kernels), so compute runs unslowed.
  int dispatch_sms = -1;
  // Hierarchical dispatch and combine: each inter-node batch moves in this many pieces, one after the
  // other, and the NVLink hop on the far side (dispatch) or the near side (combine) handles each piece
  // as it arrives, so the two hops overlap (pipelined, as DeepEP's chunked forwarding); 1: whole.
  int forward_pieces = 4;
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
  // kAuto: a synthetic uniform all-to-all runs as one flow per GPU where that is exact
  // (docs/simulator.md, "Aggregated uniform all-to-all"), every other transfer in the fluid network;
  // kFluid: every transfer in the fluid network; kFlow: every (source, destination) transfer is its
  // own SimGrid flow. SimResult::aggregated_flows and fluid_flows say which ran.
  NetworkFidelity fidelity = NetworkFidelity::kAuto;
  // The fluid network's tolerance (docs/simulator.md, "Solving in epochs"): 0 solves it at every
  // change (exact max-min); t > 0 solves it in epochs, within t of the flows' moving times;
  // kAutoTolerance lets the engine choose (auto_network_tolerance). SimGrid's flows (kFlow) are
  // always exact. SimResult::network_tolerance says what ran.
  double network_tolerance = 0.0;
  // Leave links that can never limit a transfer out of the SimGrid routes (docs/simulator.md,
  // "Platform"); the results are the same either way (tests compare), with fewer constraints to solve.
  bool prune_routes = true;
  // Build each step's graph (drawing its batch from the trace, routing its tokens) on a worker
  // thread while the engine runs the step before it (docs/simulator.md, "Building ahead"). The
  // graphs are the same either way; false builds each step in the engine's thread when it starts.
  bool build_ahead = true;
  RebalanceOptions rebalance;
};

// network.tolerance: auto.
inline constexpr double kAutoTolerance = -1.0;
// What auto runs with (docs/simulator.md, "Solving in epochs"): epochs of kAutoEpochTolerance where
// an all-to-all is one connected set of flows over 64 or more GPUs (flat or low-latency dispatch
// over an EP group of 64 or more: thousands of flows, each completion moving most of them), exact
// max-min everywhere else (hierarchical phases and smaller groups gain nothing from epochs).
inline constexpr double kAutoEpochTolerance = 0.02;
inline constexpr int kAutoEpochRanks = 64;
double auto_network_tolerance(DispatchMode dispatch, int ep_ranks);
// Where auto moves flat and low-latency all-to-alls as port phases (docs/simulator.md, "Port
// phases"): EP x TP of at least kAutoPortRanks GPUs, on a cluster where they fit.
inline constexpr int kAutoPortRanks = 256;
bool auto_port_phases(DispatchMode dispatch, int ep_ranks);

struct EngineInput {
  const models::Architecture* arch = nullptr;
  const models::Cluster* cluster = nullptr;
  const models::Profile* profile = nullptr;
  const Placement* placement = nullptr;  // MoE workloads
  int tp = 1;
  int ep = 1;
  const Workload* workload = nullptr;
  StepSource* steps = nullptr;  // prefill/decode and MoE training
  EngineOptions options;
  // Online rebalancing (options.rebalance): solves a placement from a window's routing counts (the
  // policy's own rules; it must return a placement for the same ep and tp). resolve_pairs: the policy
  // reads the cross-layer pair counts (RoutingCounts::next) too, so they are counted.
  std::function<Placement(const RoutingCounts&)> resolve;
  bool resolve_pairs = false;
};

}  // namespace moesim::sim
