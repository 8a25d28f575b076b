// Longest-processing-time partitioning and the greedy placement policy built on it: per layer, LPT
// on the profiled loads with at most ceil(E/EP) experts per rank. Loads are token-expert assignments
// (any non-negative weights for lpt_partition).
#pragma once

#include <vector>

namespace moesim::sim {

// Experts by load descending (ties: lower id first), each to the least loaded bin (ties: lower bin)
// among those with fewer than `cap` experts (cap <= 0: no cap), empty bins first. Returns the bin of
// every expert. Throws std::invalid_argument for bins < 1.
std::vector<int> lpt_partition(const std::vector<double>& load, int bins, int cap);

}  // namespace moesim::sim
