// Online rebalancing (docs/simulator.md, "Online rebalancing"): the placement solved again every N
// steps from the routing of a window of recent steps, as serving engines re-run EPLB, and the expert
// copies whose holders change, each moved from a rank that held it. Decided from the steps' routing
// alone, never from simulated time, so every step range and process makes the same decisions. No
// SimGrid here: the graph builder turns a plan's moves into transfers.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "sim/engine/engine_input.hpp"
#include "sim/engine/step_source.hpp"
#include "sim/placement/placement.hpp"
#include "sim/placement/routing_counts.hpp"

namespace moesim::sim {

// One expert copy to move: MoE layer index (the placement's), expert, from EP rank, to EP rank.
struct ExpertMove {
  int layer = 0, expert = 0, from = 0, to = 0;
  bool operator==(const ExpertMove&) const = default;
};

struct MigrationPlan {
  int step = 0;                                 // the step it comes before
  std::shared_ptr<const Placement> placement;  // the placement solved from the window
  std::vector<ExpertMove> moves;
};

// The copies that arrive on a rank that did not hold them when `before` becomes `after`: each from a
// holder in `before` on the receiving rank's node when there is one, else from any holder; among
// those, the one sending the fewest copies so far (then the lowest rank), so that the sends spread
// over the holders. A copy dropped costs nothing.
std::vector<ExpertMove> expert_moves(const Placement& before, const Placement& after, const std::vector<int>& rank_node);

class Rebalancer {
 public:
  // `initial`: the placement the run starts from; `rank_node[r]`: EP rank r's node; `total_steps`:
  // warmup and measured steps. Throws InputError when the window or interval is unusable.
  Rebalancer(const EngineInput& input, std::shared_ptr<const Placement> initial, std::vector<int> rank_node,
             int total_steps);
  // Before step `step` is drawn: the plan when the placement is solved again at this step.
  std::optional<MigrationPlan> before(int step);
  // Step `step`'s routing, counted into the windows of the rebalances it belongs to.
  void observe(int step, const StepBatch& batch);

 private:
  RoutingCounts empty_counts() const;
  const EngineInput& input_;
  std::shared_ptr<const Placement> current_;
  std::vector<int> rank_node_;
  int every_, window_, total_;
  std::size_t layers_, experts_, k_;
  std::map<int, RoutingCounts> windows_;  // by the step the rebalance comes before
};

}  // namespace moesim::sim
