// Placements simulated on held-out traffic (docs/placement.md, "place evaluate"): the baseline
// variant of a study (configs/studies/default.yaml unless given) with the placement's architecture,
// cluster, parallelism and file and the held-out trace substituted, validated as any scenario is, and
// run with the requested timeline only.
#pragma once

#include <string>

#include "sim/placement/evaluate.hpp"

namespace moesim::sim {

struct PlacementSimOptions {
  std::string study;  // "" = configs/studies/default.yaml
  int steps = 0;      // 0 = the study's
  bool residence = false;  // simulate with dispatch.mode residence (else the study's dispatch)
};

// Fills the simulated fields of `e` (step p50/p99, energy, per-layer tails; simulated = true).
void simulate_placement(const CheckedPlacement& placement, const std::string& heldout_trace,
                        const PlacementSimOptions& options, PlacementEvaluation& e);

}  // namespace moesim::sim
