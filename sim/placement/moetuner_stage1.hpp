// MoETuner's stage 1 (arXiv:2502.06643, docs/placement.md): per MoE layer, the experts split into
// G clusters (one per EP rank) with token loads as even as possible. Loads are token-expert
// assignments; the objective of a layer is sum_c |T[c] - mean|, in the same units. Two variants: one
// copy per expert (moetuner, moetuner_equal) and redundant copies (moetuner_replicated).
#pragma once

#include <vector>

#include "sim/placement/solver_limits.hpp"

namespace moesim::sim {

// clusters[l][e] in 0..G-1, every cluster non-empty.
struct Stage1Result {
  std::vector<std::vector<int>> clusters;
  std::vector<double> layer_objective, layer_bound;
  std::vector<bool> layer_optimal;
  StageReport report;
};
double stage1_layer_objective(const std::vector<double>& load, const std::vector<int>& cluster, int clusters);
// max(2 x the loads above the mean, integrality), a valid bound on one layer's stage-1 optimum.
double stage1_layer_bound(const std::vector<double>& load, int clusters);
// Greedy warm starts, local search, then a symmetry-broken ILP on GLPK where a gap remains.
// equal_sizes: every cluster holds floor(E/G) or ceil(E/G) experts (the moetuner_equal policy).
// Throws InputError when a layer has fewer experts than clusters.
Stage1Result moetuner_stage1(const std::vector<std::vector<double>>& load, int clusters, const SolverLimits& limits,
                             bool equal_sizes = false);

// Stage 1 of moetuner_replicated: per layer, `replicas` redundant copies (replica_counts: each to the
// expert of highest load per copy, at most `clusters` copies of one), a copy carrying its expert's
// load over its copy count, packed with slot counts differing by at most one and no two copies of an
// expert in one cluster. clusters[l][e]: the clusters holding e's copies (sorted, distinct).
struct ReplicatedStage1Result {
  std::vector<std::vector<std::vector<int>>> clusters;
  // layer_bound: for the packing of the chosen copy counts (the larger of stage1_replicated_bound and
  // the busiest cluster's least load, docs/placement.md).
  std::vector<double> layer_objective, layer_bound;
  StageReport report;
};
std::vector<int> replica_counts(const std::vector<double>& load, int replicas, int max_copies);
// 2 x the least total excess over the mean that copies can keep, over every choice of copy counts:
// a valid bound for any packing with `replicas` redundant copies (slot counts relaxed).
double stage1_replicated_bound(const std::vector<double>& load, int clusters, int replicas);
double stage1_replicated_objective(const std::vector<double>& load, const std::vector<std::vector<int>>& clusters_of,
                                   int clusters);
// Throws InputError when the replicas cannot be placed (fewer copies than ranks, or more than
// experts x (ranks - 1)).
ReplicatedStage1Result moetuner_stage1_replicated(const std::vector<std::vector<double>>& load, int clusters,
                                                  int replicas);

}  // namespace moesim::sim
