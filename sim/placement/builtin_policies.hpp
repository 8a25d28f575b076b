// Registration of the built-in placement policies, one function per implementation file, called by
// register_builtin_placements in the order `moesim place --help` lists them. Each registers its
// policies with a one-line summary. Internal to sim/placement.
#pragma once

#include "sim/placement/policy.hpp"

namespace moesim::sim {

void register_baseline_placements(PlacementRegistry& registry);  // contiguous, round_robin, random (baselines.cpp)
void register_greedy_placement(PlacementRegistry& registry);     // greedy (greedy.cpp)
void register_eplb_placement(PlacementRegistry& registry);       // eplb (eplb.cpp)
// moetuner, moetuner_equal, moetuner_replicated (moetuner.cpp)
void register_moetuner_placements(PlacementRegistry& registry);
void register_exflow_placement(PlacementRegistry& registry);  // exflow (exflow.cpp)

}  // namespace moesim::sim
