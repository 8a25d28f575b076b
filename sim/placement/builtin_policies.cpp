// The one file that knows every built-in policy: the top of the placement room's dependencies.
#include "sim/placement/builtin_policies.hpp"

namespace moesim::sim {

void register_builtin_placements(PlacementRegistry& registry) {
  register_baseline_placements(registry);
  register_greedy_placement(registry);
  register_eplb_placement(registry);
  register_moetuner_placements(registry);
  register_exflow_placement(registry);
}

PlacementRegistry default_placement_registry() {
  PlacementRegistry registry;
  register_builtin_placements(registry);
  return registry;
}

}  // namespace moesim::sim
