// Building blocks of the stage-2 driver (moetuner_stage2.cpp) that live in their own files: one
// layer's neighbour weights and its assignment ILP (stage2_layer.cpp), and the memory balance with the
// exhaustive layer-pair search (stage2_balance.cpp). Seconds and experts as in stage2_problem.hpp.
// Internal to sim/placement: tests go through moetuner_stage2.hpp.
#pragma once

#include <cstddef>
#include <vector>

#include "sim/placement/solver_limits.hpp"
#include "sim/placement/stage2_problem.hpp"

namespace moesim::sim::stage2 {

// Per rank g and cluster c of layer l, [c * G + g]: the slowest transfer into c on g from the
// neighbour's layout (left: layer l-1 fixed) or out of it (right: layer l+1 fixed).
std::vector<double> left_weights(const Stage2Problem& p, std::size_t l, const std::vector<int>& prev);
std::vector<double> right_weights(const Stage2Problem& p, std::size_t l, const std::vector<int>& next);

struct LayerAssignment {
  std::vector<int> cluster_on;
  bool improved = false, limit_hit = false, optimal = false;
};
// The layout of layer l minimising (slowest transfer from the left neighbour) + (slowest to the right
// one), with each rank's experts over all layers kept in [lo_g, hi_g] (no rows when lo or hi is
// null): an assignment-sized ILP on GLPK started from `current`, which it returns when GLPK finds
// nothing better.
LayerAssignment layer_assignment(const Stage2Problem& p, std::size_t l, const std::vector<double>* left,
                                 const std::vector<double>* right, const std::vector<int>& current,
                                 const std::vector<int>* lo, const std::vector<int>* hi, const SolverLimits& limits,
                                 double seconds);

// Experts per rank over all layers of a layout, and how far those totals lie outside [lo, hi].
std::vector<int> memory_totals(const Stage2Problem& p, const std::vector<std::vector<int>>& on);
int memory_violation(const std::vector<int>& total, int lo, int hi);
// Swaps the clusters of two ranks in one layer until every rank's expert total is in [lo, hi] (or
// no swap helps), each time the swap that costs the least objective.
void balance_memory(const Stage2Problem& p, std::vector<std::vector<int>>& on, int lo, int hi);
// One expert moved from a rank over the range (or above lo) to one under it (or below hi) along the
// cheapest chain of swaps, each between two ranks whose clusters in one layer differ by one expert,
// costed by how far it can raise the pairs around its layer. True when it lowered the violation.
bool balance_by_path(const Stage2Problem& p, std::vector<std::vector<int>>& on, int lo, int hi);
// Swaps inside each node only (a node's experts stay where they are): for ranks of one node outside
// [lo, hi], the swap of two of its ranks' clusters in one layer that moves their totals toward the
// middle, the one that can raise the pairs around its layer least, until every rank of the node is
// in range or no swap moves toward it.
void balance_within_nodes(const Stage2Problem& p, std::vector<std::vector<int>>& on, int lo, int hi);
// For a few ranks (G! <= 120): every layout of two adjacent layers at once, given the rest, kept when
// it lowers the objective and the experts outside [lo, hi] do not grow; repeated until nothing improves.
void exhaustive_layer_pairs(const Stage2Problem& p, std::vector<std::vector<int>>& on, int lo, int hi,
                            const SolverLimits& limits, solver::Clock::time_point deadline);

}  // namespace moesim::sim::stage2
