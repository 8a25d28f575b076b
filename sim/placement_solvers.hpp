// Placement solvers behind the PlacementPolicy interface (docs/placement.md): random, greedy (LPT per
// layer), eplb (DeepSeek's expert-parallel load balancer, as published) and moetuner (the two-stage
// ILP of arXiv:2502.06643 on GLPK, decomposed; equal-size and replicated variants). Loads are
// token-expert assignments (RoutingCounts);
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

// Registers random, greedy, eplb, moetuner, moetuner_equal and moetuner_replicated (called from
// register_builtin_placements).
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
  int perturbations = 400;       // stage-2 iterated local search rounds (up to 16 ranks)
  long chain_entries = 8000000;  // stage-2 chain program (<= 5 ranks): entries over all layers, 12 bytes each
  long node_chain_states = 2000000;  // stage-2 two-node chain program: states over all cutoffs, about 60 bytes each
  int tie_break_sweeps = 20;  // stage-2 tie-break (stage2_tie_break): sweeps over the layers, 0 = off
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
  bool chain_proven = false;  // the chain program proved the whole stage optimal, memory rows included
  long chain_entries = 0;     // its work (0 when it did not run)
  // The two-node chain program (stage2_two_node_chain) gave the stage bound; proven: it met the objective.
  bool node_chain_bound = false, node_chain_proven = false;
  long node_chain_states = 0;
  // The tie-break (stage2_tie_break): total transfer seconds before and after it, layers it changed.
  double volume_before_tie_break = 0.0, volume = 0.0;
  int tie_break_changes = 0;
  StageReport report;
};
double stage2_pair_objective(const Stage2Problem& p, std::size_t l, const std::vector<int>& from,
                             const std::vector<int>& to);
double stage2_objective(const Stage2Problem& p, const std::vector<std::vector<int>>& cluster_on);
// A valid lower bound on one layer pair's objective (memory rows dropped): the larger of the
// matching/node-block bound and stage2_pair_threshold_bound.
double stage2_pair_bound(const Stage2Problem& p, std::size_t l);
// The smallest limit T for which the pair's clusters can be placed with no rank pair above T, every
// intra-node link taken at the fastest intra-node cost and every inter-node link at the fastest
// inter-node one: the pairs above T at the same-rank cost must form a matching, and those above T at
// the inter-node cost tie clusters to one node. Exact pair optimum on one node or two nodes with
// uniform links; with more nodes only the component-size condition is checked (still a bound).
double stage2_pair_threshold_bound(const Stage2Problem& p, std::size_t l);
// Three layers at once (the same relaxation): the least alpha x (pair l) + beta x (pair l + 1) over
// the layouts of layers l, l+1, l+2, by threshold pairs; exact for two uniform nodes.
double stage2_window_bound(const Stage2Problem& p, std::size_t l, double alpha, double beta);
// A bound on the whole chain that sees the layer two pairs share: the larger of the overlapping
// windows (every pair's weight split over the windows that hold it) and the disjoint ones.
double stage2_chain_window_bound(const Stage2Problem& p);
// The exact optimum of the whole stage-2 chain with every rank's experts in [lo, hi], for up to 5
// ranks: a dynamic program over (layer, layout, experts per rank so far), pruned against `incumbent`
// (infinity: no pruning) with the chain's exact optimum without the memory rows. completed: the
// program ran within `entry_limit` (layout x count-vector entries over all layers); feasible: it found
// a balanced chain of cost <= incumbent (when completed and not feasible, none beats the incumbent).
struct ChainDpResult {
  bool completed = false, feasible = false;
  double objective = 0.0;
  std::vector<std::vector<int>> cluster_on;
  long entries = 0;
};
ChainDpResult stage2_chain_dp(const Stage2Problem& p, int lo, int hi, double incumbent, long entry_limit);
// Two nodes (up to 16 ranks): the chain over layers of which clusters sit on the first node, with
// every inter-node link at the cheapest inter-node cost and links inside a node free (a relaxation
// of the whole stage: no rank pair is cheaper, and the memory rows summed over each node's ranks keep
// the node's experts over all layers in [ranks x lo, ranks x hi]). unconstrained: its exact optimum
// without the node totals. With them, a dynamic program over (layer, first node's clusters, its
// experts so far), pruned with the unconstrained cost to go at cutoffs rising up to `incumbent`;
// completed and feasible: `objective` is its exact optimum, a valid lower bound on the stage problem,
// and cluster_on a layout with those node sets (ranks inside each node balanced for memory, not
// necessarily in [lo, hi]). completed and not feasible: no chain at or below the incumbent.
struct TwoNodeChainResult {
  bool applicable = false, completed = false, feasible = false;
  double unconstrained = 0.0, objective = 0.0;
  std::vector<std::vector<int>> cluster_on;
  long entries = 0;  // states of the program with node totals, over all cutoffs tried
};
TwoNodeChainResult stage2_two_node_chain(const Stage2Problem& p, int lo, int hi, double incumbent, long entry_limit);
// One layer's layout given its neighbours, exactly: the layout (cluster_on[g]) minimising
// max_g left[c*G+g] + max_g right[c*G+g] over c = cluster_on[g], using only allowed[c*G+g] entries
// (left or right may be null), by threshold matchings (every candidate left value, the least right
// value that still admits a perfect matching). Empty when no allowed layout exists.
std::vector<int> stage2_layer_exact(std::size_t G, const std::vector<double>* left, const std::vector<double>* right,
                                    const std::vector<char>& allowed);
// The stage-2 tie-break (docs/placement.md): the total transfer time of the layout, sum over layer
// pairs and rank pairs g1 != g2 of traffic x cost, the sum to the objective's maximum.
double stage2_pair_volume(const Stage2Problem& p, std::size_t l, const std::vector<int>& from,
                          const std::vector<int>& to);
double stage2_volume(const Stage2Problem& p, const std::vector<std::vector<int>>& cluster_on);
// Per layer, its neighbours fixed: among the layouts whose slowest transfer from the left layer and
// to the right one are no larger than now, and whose ranks keep their experts in [lo, hi] (a rank
// outside it moves no farther out), the one of least stage2_volume (a min-cost assignment), kept
// when it lowers the volume. Forward and backward sweeps until one changes nothing, at most
// `sweeps`. No pair objective rises, so stage2_objective never does. Returns the layers changed.
int stage2_tie_break(const Stage2Problem& p, std::vector<std::vector<int>>& cluster_on, int lo, int hi, int sweeps);
Stage2Result moetuner_stage2(const Stage2Problem& p, const SolverLimits& limits);

// Building blocks shared by the solver and the evaluation.
// Seconds per token between EP ranks (rank r = GPUs r*tp .. r*tp+tp-1; a token's bytes are split over
// the tp GPUs): bytes per token / (tp x the GPUs' bandwidth); 0 on the diagonal.
std::vector<double> rank_token_cost(const models::Architecture& arch, const models::Cluster& cluster, int ep, int tp);
std::vector<int> rank_nodes(const models::Cluster& cluster, int ep, int tp);
Stage2Problem stage2_problem(const RoutingCounts& routing, const std::vector<std::vector<int>>& clusters,
                             const models::Architecture& arch, const models::Cluster& cluster, int ep, int tp);
// The same for clusters holding copies (moetuner_replicated): traffic split evenly over the copies.
Stage2Problem stage2_problem_replicated(const RoutingCounts& routing,
                                        const std::vector<std::vector<std::vector<int>>>& clusters,
                                        const models::Architecture& arch, const models::Cluster& cluster, int ep,
                                        int tp);
// Cross-layer traffic between layers l and l+1 by rank pair, [from rank * EP + to rank]: the R
// counts with a replicated expert's share split evenly over its copies.
std::vector<double> cross_layer_rank_traffic(const Placement& placement, const RoutingCounts& routing, std::size_t l);
// The stage-2 objective recomputed from a placement (a replicated expert's traffic split evenly over
// its copies) and routing counts: sum over layer pairs of the slowest rank pair's seconds.
double placement_traffic_objective(const Placement& placement, const RoutingCounts& routing,
                                   const models::Architecture& arch, const models::Cluster& cluster);

}  // namespace moesim::sim
