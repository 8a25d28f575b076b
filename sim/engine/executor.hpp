// Runs step graphs in SimGrid (docs/simulator.md, "Contention"): starts each task as its
// predecessors complete (computes as Execs on the GPU's host, transfers as Comms between GPU hosts),
// slows a GPU's compute and its ports while it computes and communicates at once (the profile's
// contention factors), and accounts energy, busy time, per-layer tails, traffic and the timeline.
// Lives in the engine's thread; takes graphs from a StepBuilder.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include <simgrid/s4u.hpp>

#include "models/costs.hpp"
#include "sim/engine/activity_dump.hpp"
#include "sim/engine/engine_input.hpp"
#include "sim/engine/platform.hpp"
#include "sim/engine/result.hpp"
#include "sim/engine/step_builder.hpp"

namespace moesim::sim {

struct ExecutorSetup {
  // W idle and while only communicating, clock limit and cap applied. A compute task draws its own
  // power (Task::power, or Task::power_with_comm while the GPU also communicates) x power_factor,
  // never above power_cap (0: none).
  double idle_watts = 0.0, comm_watts = 0.0;
  double power_factor = 1.0;  // clock limit
  double power_cap = 0.0;
  int first_step = 0;                   // the first step simulated (earlier ones were skipped)
  int total_steps = 0;                  // the step after the last one simulated
};

class Executor {
 public:
  Executor(const EngineInput& input, const LayerTable& layers, Platform& platform, StepBuilder& builder,
           ActivityDump* dump, const ExecutorSetup& setup);
  // Registers the completion callback and starts the first step; engine.run() does the rest.
  void start();
  // After engine.run(): the result of the measured steps (RunError when a dependency was never met).
  SimResult finish(int measured_steps);

 private:
  struct GpuTrack {
    int comm_active = 0;              // transfers in flight touching this GPU
    const Task* compute = nullptr;    // the running compute task
    const Task* last_comm = nullptr;  // the most recent transfer started here (contention lookup)
    double state_since = 0.0;
    models::GpuState state = models::GpuState::kIdle;
    double watts = 0.0;  // drawn since state_since
    // The last contention lookup: the same operation against the same GEMM recurs many times in a row.
    models::CollectiveOp cached_op = models::CollectiveOp::kAllToAll;
    double cached_bytes = -1.0, cached_flops = -1.0;
    models::ComputeClass cached_class = models::ComputeClass::kComputeBound;
    int cached_sms = -2;
    models::Slowdown cached;
  };
  // models::contention by (operation, operation bytes, GEMM FLOP): the same few pairs recur all run.
  struct ContentionKey {
    models::CollectiveOp op;
    double bytes, flops;
    models::ComputeClass cls;
    int sms;
    bool operator==(const ContentionKey&) const = default;
  };
  struct ContentionHash {
    std::size_t operator()(const ContentionKey& k) const;
  };

  void start_step();
  void start_task(std::uint32_t id);
  void start_compute(Task& t, std::uint32_t id);
  void start_transfer(Task& t, std::uint32_t id);
  // The GPUs whose ports a transfer crosses: both ends, or the one whose end of the route it moves on.
  struct Ends {
    std::array<int, 2> gpu{};
    std::size_t n = 0;
    const int* begin() const { return gpu.data(); }
    const int* end() const { return gpu.data() + n; }
  };
  static Ends ends(const Task& t) {
    if (t.side == Task::Side::kRoute) return {{t.gpu, t.dst}, 2};
    return {{t.side == Task::Side::kIngress ? t.dst : t.gpu, -1}, 1};
  }
  void complete(std::uint32_t id);
  void activity_done(std::uint32_t id);
  void finish_task(Task& t);
  // Transfer t's GPUs stop communicating at `at` (its end; a port phase's: the phase's end).
  void end_comm(const Task& t, double at);
  // Whether the running step is one the timeline records (the first timeline_steps measured ones).
  bool in_timeline() const;
  void record_timeline(const StepGraph& g, const Task& t);
  void record_power(int gpu, double at);  // a power sample: the GPU's watts from `at` on
  void end_step(double end);
  void refresh_contention(int gpu);
  const models::Slowdown& slowdown(GpuTrack& tr, const Task& comm);
  void account_state(int gpu);
  void dump_step(const StepGraph& g);
  static constexpr std::size_t kLayerSums = 5;
  std::size_t gpu_layer(int gpu, int layer) const {
    return static_cast<std::size_t>(gpu) * layers_.size() + static_cast<std::size_t>(layer);
  }

  const EngineInput& in_;
  const models::Profile& profile_;
  const LayerTable& layers_;
  Platform& platform_;
  StepBuilder& builder_;
  ActivityDump* dump_;
  ExecutorSetup setup_;
  std::uint64_t dump_next_id_ = 0;  // global id of the current step's first task
  std::uint64_t dump_prev_end_ = 0;  // global id of the previous step's end task

  // The running step's graph and the one before (its tasks may still be referenced from the
  // completion callback that starts the next step).
  std::unique_ptr<StepGraph> current_, previous_;
  // The SimGrid activity of each running task of the current step, by task id. A finished activity
  // moves to `finished_` and is released at the next completion callback, once SimGrid is done with
  // it: memory follows the activities in flight, not every activity of the step.
  std::vector<simgrid::s4u::ActivityPtr> running_, finished_;
  std::vector<std::uint32_t> worklist_;
  bool draining_ = false;
  int step_index_ = 0;  // steps started so far
  double step_start_ = 0.0;
  bool measuring_ = false;

  std::vector<GpuTrack> track_;
  std::unordered_map<ContentionKey, models::Slowdown, ContentionHash> contention_memo_;
  // Per-step, per (gpu, layer slot) accumulators.
  std::vector<double> token_time_;
  std::vector<int> a2a_active_;
  std::vector<double> a2a_since_, a2a_time_;
  std::vector<double> layer_sums_;  // [slot][5]: token tail, token avg, a2a tail, a2a avg, span
  std::vector<double> layer_first_, layer_last_;  // per slot, this step: earliest task start, latest end
  std::vector<double> rank_token_sums_;
  // [gpu * 2 + lane - 1], timeline steps: payload bytes sent since the GPU's last stream operation of
  // that lane (1 communication, 2 combine) was recorded.
  std::vector<double> timeline_bytes_;
  SimResult result_;
};

}  // namespace moesim::sim
