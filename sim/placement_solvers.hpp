// Placement solvers behind the PlacementPolicy interface (docs/placement.md): random, greedy (LPT per
// layer), eplb (DeepSeek's expert-parallel load balancer, as published) and moetuner (the two-stage
// ILP of arXiv:2502.06643 on GLPK, decomposed). Loads are token-expert assignments (RoutingCounts);
// the stage-2 objective is in seconds: tokens x bytes per token / bytes per second.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "sim/placement.hpp"

namespace moesim::sim {

// Registers random, greedy, eplb, moetuner and moetuner_equal (called from register_builtin_placements).
void register_solver_placements(PlacementRegistry& registry);

// Longest-processing-time first: experts by load descending (ties: lower id first), each to the
// least loaded bin (ties: lower bin) among those with fewer than `cap` experts (cap <= 0: no cap).
// Returns the bin of every expert.
std::vector<int> lpt_partition(const std::vector<double>& load, int bins, int cap);

// DeepSeek's EPLB (deepseek-ai/EPLB rebalance_experts): `weight[l][e]` loads, `slots` physical experts
// per layer (experts + redundant), `groups` expert groups, `nodes`, `gpus`. Hierarchical when nodes
// divide groups, else global (groups = nodes = 1). phy2log[l][s]: the logical expert in slot s; slot s
// is on GPU s / (slots / gpus). Throws InputError when the sizes do not divide as EPLB needs.
struct EplbMap {
  std::vector<std::vector<int>> phy2log;
  std::vector<std::vector<int>> replica_count;  // [l][e]
  bool hierarchical = false;
};
EplbMap eplb_rebalance(const std::vector<std::vector<double>>& weight, int slots, int groups, int nodes, int gpus);

// Solver limits. The work limit (branch-and-bound nodes per GLPK sub-problem, block-coordinate sweeps)
// makes results machine-independent; time_limit (s, 0 = none) is a wall-clock cap on top.
struct SolverLimits {
  int node_limit = 400;
  int sweeps = 6;
  double time_limit = 0.0;
};

// A stage's outcome. status: "optimal" (objective equals the bound), "feasible" (every sub-problem
// finished, a gap remains), "limit_reached" (a work or time limit cut a sub-problem short).
struct StageReport {
  std::string status;
  double objective = 0.0;
  double bound = 0.0;  // valid lower bound on the whole stage problem
  double gap = 0.0;    // (objective - bound) / objective, 0 when both are 0
  double seconds = 0.0;
  int parts = 0;          // sub-problems (layers, layer pairs)
  int parts_optimal = 0;  // of which proven optimal
  int glpk_solves = 0;
  nlohmann::json to_json() const;
};

// Stage 1, per layer: clusters[l][e] in 0..G-1, every cluster non-empty; objective
// sum_l sum_c |T[c,l] - mean[l]|.
struct Stage1Result {
  std::vector<std::vector<int>> clusters;
  std::vector<double> layer_objective, layer_bound;
  std::vector<bool> layer_optimal;
  StageReport report;
};
double stage1_layer_objective(const std::vector<double>& load, const std::vector<int>& cluster, int clusters);
// max(2 x the loads above the mean, integrality), a valid bound on one layer's stage-1 optimum.
double stage1_layer_bound(const std::vector<double>& load, int clusters);
// equal_sizes: every cluster holds floor(E/G) or ceil(E/G) experts (the moetuner_equal policy).
Stage1Result moetuner_stage1(const std::vector<std::vector<double>>& load, int clusters, const SolverLimits& limits,
                             bool equal_sizes = false);

// Stage 2: maps the clusters of each layer to ranks. traffic[l][c1 * G + c2]: tokens from cluster c1
// of layer l to cluster c2 of layer l + 1; cost[g1 * G + g2]: seconds per token from rank g1 to g2
// (0 on the diagonal); sizes[l][c]: experts in the cluster; node[g]: the node of rank g.
struct Stage2Problem {
  int ranks = 0;
  std::vector<std::vector<double>> traffic;
  std::vector<double> cost;
  std::vector<std::vector<int>> sizes;
  std::vector<int> node;
};
struct Stage2Result {
  std::vector<std::vector<int>> cluster_on;  // [l][g]: the cluster rank g holds in layer l
  std::vector<double> pair_objective, pair_bound;
  int memory_min = 0, memory_max = 0;  // experts per rank over all layers, after balancing
  int memory_target_lo = 0, memory_target_hi = 0;
  StageReport report;
};
double stage2_pair_objective(const Stage2Problem& p, std::size_t l, const std::vector<int>& from,
                             const std::vector<int>& to);
double stage2_objective(const Stage2Problem& p, const std::vector<std::vector<int>>& cluster_on);
double stage2_pair_bound(const Stage2Problem& p, std::size_t l);
Stage2Result moetuner_stage2(const Stage2Problem& p, const SolverLimits& limits);

// Building blocks shared by the solver and the evaluation.
// Seconds per token between EP ranks (rank r = GPUs r*tp .. r*tp+tp-1; a token's bytes are split over
// the tp GPUs): bytes per token / (tp x the GPUs' bandwidth); 0 on the diagonal.
std::vector<double> rank_token_cost(const models::Architecture& arch, const models::Cluster& cluster, int ep, int tp);
std::vector<int> rank_nodes(const models::Cluster& cluster, int ep, int tp);
Stage2Problem stage2_problem(const RoutingCounts& routing, const std::vector<std::vector<int>>& clusters,
                             const models::Architecture& arch, const models::Cluster& cluster, int ep, int tp);
// The stage-2 objective recomputed from a placement (a replicated expert's traffic split evenly over
// its copies) and routing counts: sum over layer pairs of the slowest rank pair's seconds.
double placement_traffic_objective(const Placement& placement, const RoutingCounts& routing,
                                   const models::Architecture& arch, const models::Cluster& cluster);

}  // namespace moesim::sim
