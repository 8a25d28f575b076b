// The graph of one simulated step (docs/simulator.md, "Steps"): compute tasks (an Exec on a GPU's
// host), transfers (a Comm between two GPU hosts) and joins (zero-cost synchronisation points, some
// of them a stream operation drawn in the timeline), with dependency edges. Built by the
// GraphBuilder without SimGrid, run by the Executor. Amounts: compute in seconds at full speed,
// transfers in bytes.
#pragma once

#include <array>
#include <cstdint>
#include <exception>
#include <span>
#include <utility>
#include <vector>

#include "models/profile.hpp"

namespace moesim::sim {

enum class TaskKind : std::uint8_t { kCompute, kTransfer, kJoin };
// What a task is, for the timeline, the per-layer statistics and the contention lookup.
enum class Category : std::uint8_t {
  kAttention, kDense, kShared, kExpert, kHead, kSynthetic, kDispatch, kCombine, kTpCollective, kGradient, kOther,
  kMigration,  // expert weights moved by an online rebalance
  kCoherence   // residence dispatch: the all-gathers that keep every GPU's context coherent
};
inline constexpr std::array<const char*, 13> kCategoryNames{
    "attention",     "dense_ffn", "shared_experts", "experts",   "lm_head",   "compute",  "dispatch",
    "combine",       "tp_collective", "dp_collective", "other", "migration", "coherence"};
inline const char* category_name(Category c) { return kCategoryNames[static_cast<std::size_t>(c)]; }

struct Task {
  // Fields ordered to pack (graphs of a large step hold millions of tasks).
  // transfer: where it moves (docs/simulator.md, "Port phases"): kRoute on the route from gpu to dst;
  // kEgress on gpu's own ports only (the source side of that route), kIngress on dst's own ports only
  // (its destination side): a phase's bytes out of one GPU, or into one, as one activity.
  enum class Side : std::uint8_t { kRoute, kEgress, kIngress };
  TaskKind kind = TaskKind::kJoin;
  Category category = Category::kOther;
  bool timeline = false;  // join: a stream operation worth drawing
  bool any_of = false;    // join: starts when its first predecessor completes (not its last)
  bool held = false;      // transfer: its GPUs stay communicating after it ends (see held_begin)
  Side side = Side::kRoute;
  std::int16_t comm_sms = -1;  // transfer: SMs its operation's kernels hold (-1: the profile's; 0: none)
  int gpu = -1;           // compute: host; transfer: source; join: the GPU whose stream it belongs to
  int dst = -1;           // transfer: destination
  int layer = -1;         // index into the layer table, -1 for none
  int pending = 0;        // predecessors not yet complete
  double merged_part = 0.0;  // transfer: > 0 when it stands for its source's whole uniform all-to-all
                             // (this many bytes to every other GPU; see GraphBuilder::build_synthetic_step)
  double amount = 0.0;    // compute: seconds at full speed; transfer: bytes on the wire
  double payload = 0.0;   // transfer: bytes of data it carries (amount is scaled to its operation's rate)
  double latency = 0.0;   // transfer: s before its first byte moves (its operation's fixed cost); 0: the route's
  double flops = 0.0;     // compute: FLOP, for the contention lookup
  models::ComputeClass compute_class = models::ComputeClass::kComputeBound;  // compute: its roofline class
  models::CollectiveOp comm_op = models::CollectiveOp::kAllToAll;
  double power = 0.0;     // compute: W it draws alone, uncapped, at the full clock (models::kernel_power)
  double power_with_comm = 0.0;  // compute: W while its GPU also communicates (models::kernel_power_with_comm)
  double op_bytes = 0.0;  // transfer: bytes of the whole operation it belongs to (contention lookup)
  double start = -1.0, end = -1.0;
  std::uint32_t gate = 0;  // join of a stream operation: the task that opened it
  // join: StepGraph::held[held_begin, held_end) are port-phase transfers (Task::Side) whose GPUs stay
  // communicating after their activity ends, until this join completes (docs/simulator.md, "Port phases").
  std::uint32_t held_begin = 0, held_end = 0;

  // Whether the task is an activity the engine runs: a compute with work, or a transfer between two
  // GPUs that moves bytes or waits a latency of its own (an operation's fixed cost takes time even
  // where its bytes take none). Anything else completes as soon as it starts.
  bool runs() const {
    if (kind == TaskKind::kCompute) return amount > 0.0;
    return kind == TaskKind::kTransfer && gpu != dst && (amount > 0.0 || latency > 0.0);
  }
};

// Edges are collected as (from, to) pairs while building and turned into flat successor lists (in
// insertion order) by finalize(): no per-task containers. A graph is reused from step to step,
// keeping its capacity.
struct StepGraph {
  std::vector<Task> tasks;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;
  std::vector<std::uint32_t> succ_begin, succ;
  std::uint32_t end_task = 0;       // the task whose completion ends the step
  std::size_t tokens = 0;           // tokens the step processes
  std::vector<double> rank_tokens;  // [layer slot * ep + rank]: tokens routed to each EP rank
  // [src * gpus + dst]: payload bytes of the step's port phases (Task::Side), which no transfer
  // carries pair by pair; empty when the step has none.
  std::vector<double> pair_bytes;
  std::vector<std::uint32_t> held;  // see Task::held_begin
  std::exception_ptr error;         // building failed (the step's batch could not be drawn, ...)
  // An online rebalance before this step (docs/simulator.md, "Online rebalancing"): its step index
  // (warmup included), the expert copies it moves and their bytes; moved_step -1: none.
  int moved_step = -1;
  int moved_experts = 0;
  double moved_bytes = 0.0;
  // Token sends (docs/simulator.md, "Residence dispatch"): a token's hidden state sent from one EP
  // rank to another in a dispatch or a combine, once per destination rank; and the (token, MoE layer)
  // pairs routed. Residence dispatch: the context every GPU holds replicated, bytes per GPU.
  std::uint64_t token_sends = 0;
  std::uint64_t token_layers = 0;
  double context_bytes = 0.0;
  double coherence_bytes = 0.0;  // residence: the size of the step's coherence all-gathers, summed
  double token_inter_node_bytes = 0.0;  // dispatch and combine payload between GPUs of different nodes

  std::uint32_t add(const Task& t) {
    tasks.push_back(t);
    return static_cast<std::uint32_t>(tasks.size() - 1);
  }
  void edge(std::uint32_t from, std::uint32_t to) {
    edges.emplace_back(from, to);
    ++tasks[to].pending;
  }
  void clear();
  void finalize();
  std::span<const std::uint32_t> successors(std::uint32_t id) const {
    return {succ.data() + succ_begin[id], succ_begin[id + 1] - succ_begin[id]};
  }

 private:
  std::vector<std::uint32_t> fill_;
};

// The layers a step walks through, one slot each: decoder layers (synthetic workloads: their layers).
struct LayerTable {
  std::vector<int> ids;   // decoder-layer index per slot
  std::vector<char> moe;  // 1 for an MoE layer
  std::size_t size() const { return ids.size(); }
};

}  // namespace moesim::sim
