// One placement for the traffic of several routing traces (docs/placement.md, "Several traces: robust
// placement"). `expected` solves the policy on the traces' weighted mix (mix_routing); `worst` solves it
// on each trace alone and on the mix and keeps the candidate whose worst score over the traces is least:
// a minimax over those candidates, not an exact minimax solve. A score is place evaluate's max/mean
// rank load, the mean over MoE layers of the busiest rank's load over the mean (evaluate.hpp).
#pragma once

#include <string>
#include <vector>

#include "sim/placement/placement.hpp"
#include "sim/placement/policy.hpp"
#include "sim/placement/routing_counts.hpp"

namespace moesim::sim {

enum class RobustObjective { kExpected, kWorst };
// "expected" or "worst"; anything else is a UsageError naming --objective and the valid names.
RobustObjective parse_robust_objective(const std::string& text);
std::string robust_objective_name(RobustObjective objective);

// One of the traces. `counts` is read only for policies that need routing (tokens 0 otherwise).
struct RobustTrace {
  std::string path;    // as given; the evaluation reads the file again
  std::string sha256;  // of the file
  double weight = 1.0;  // > 0, finite; normalised over the traces
  RoutingCounts counts;
};

// Solves `policy` over two or more traces (input.routing is ignored). The placement is the chosen
// candidate's, with trace_sha256 "" (no single trace) and report["robust"]: the objective, the traces
// (file, sha256, tokens, normalised weight), the candidates (what each was solved on, its score on every
// trace and its worst) and the index of the one chosen; ties go to the earlier candidate, the mix first.
// A policy that reads no routing gives one candidate, scored on every trace, and a note. Throws
// InputError for fewer than two traces or bad weights, else as the policy and the evaluation do.
Placement place_robust(const PlacementPolicy& policy, const PlacementInput& input,
                       const std::vector<RobustTrace>& traces, RobustObjective objective);

}  // namespace moesim::sim
