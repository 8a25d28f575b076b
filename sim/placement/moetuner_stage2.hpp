// MoETuner's stage 2 solvers (docs/placement.md): the driver moetuner_stage2 and the parts it proves
// and improves with, each usable alone: lower bounds, the exact layer solve, the exact chain programs
// and the tie-break. Objectives, bounds and volumes are in seconds (stage2_problem.hpp); [lo, hi] is
// the range of experts per rank over all layers that the memory balance asks for.
#pragma once

#include <cstddef>
#include <vector>

#include "sim/placement/solver_limits.hpp"
#include "sim/placement/stage2_problem.hpp"

namespace moesim::sim {

// Several nodes of equal size: a lower bound on the whole stage with the memory rows summed per node.
// It follows the hottest cluster of each layer (`hot`). While the hot clusters of adjacent layers share
// a node, every pair heavy enough that crossing nodes would cost more than the pair's limit ties its
// clusters to that node too, so the node holds fewer experts in those layers than its largest
// clusters would give; over all layers it must still hold its ranks' share (node ranks x lo). A
// dynamic program over (layer, the hot node's experts there, the run's shortfall so far) chooses where
// runs end (a pair where the hot clusters sit on different nodes, paying their crossing) and each
// pair's limit; each pair costs at least its stage2_pair_bound. `reserve` experts are kept back from
// every run's slack (0 for the bound; more to plan runs with room to balance). applicable: the fabric
// has two or more nodes of equal size and the program fits `state_limit` states; cuts: the pairs
// where the optimum's runs end; hot: the hottest cluster of each layer.
struct HotChainResult {
  bool applicable = false;
  double bound = 0.0;
  std::vector<std::size_t> cuts, hot;
  // [l]: the most experts the optimum's hot node can hold in layer l at its pairs' limits, and the
  // clusters those limits tie to it (the hot cluster among them).
  std::vector<int> hold;
  std::vector<std::vector<int>> tied;
  long states = 0;
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
  // The hot-chain program (stage2_hot_chain_bound) raised the stage bound; proven: it met the objective.
  bool hot_chain_bound = false, hot_chain_proven = false;
  HotChainResult hot_chain;
  // The tie-break (stage2_tie_break): total transfer seconds before and after it, layers it changed.
  double volume_before_tie_break = 0.0, volume = 0.0;
  int tie_break_changes = 0;
  StageReport report;
};
// Block-coordinate descent from a chained bottleneck-assignment start (exact threshold matchings and
// an iterated local search up to 16 ranks, assignment-sized ILPs on GLPK beyond, the chain program up
// to 5 ranks), the memory balance, then the tie-break. Bounds are for the whole stage problem.
Stage2Result moetuner_stage2(const Stage2Problem& p, const SolverLimits& limits);

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

HotChainResult stage2_hot_chain_bound(const Stage2Problem& p, int lo, int reserve = 0, long state_limit = 4'000'000);

// One layer's layout given its neighbours, exactly: the layout (cluster_on[g]) minimising
// max_g left[c*G+g] + max_g right[c*G+g] over c = cluster_on[g], using only allowed[c*G+g] entries
// (left or right may be null), by threshold matchings (every candidate left value, the least right
// value that still admits a perfect matching). Empty when no allowed layout exists.
std::vector<int> stage2_layer_exact(std::size_t G, const std::vector<double>* left, const std::vector<double>* right,
                                    const std::vector<char>& allowed);

// Per layer, its neighbours fixed: among the layouts whose slowest transfer from the left layer and
// to the right one are no larger than now, and whose ranks keep their experts in [lo, hi] (a rank
// outside it moves no farther out), the one of least stage2_volume (a min-cost assignment), kept
// when it lowers the volume. Forward and backward sweeps until one changes nothing, at most
// `sweeps`. No pair objective rises, so stage2_objective never does. Returns the layers changed.
int stage2_tie_break(const Stage2Problem& p, std::vector<std::vector<int>>& cluster_on, int lo, int hi, int sweeps);

// The memory balance without giving up objective: per layer, its neighbours fixed, among the layouts
// whose slowest transfer from the left layer and to the right one are no larger than now, the one
// whose ranks' expert totals (over all layers) lie closest to (lo + hi) / 2 in squared distance (a
// min-cost assignment), kept when closer. Forward and backward sweeps until one changes nothing, at
// most `sweeps`. No pair objective rises. Returns the layers changed; the caller checks the balance.
int stage2_balance_within_bottlenecks(const Stage2Problem& p, std::vector<std::vector<int>>& cluster_on, int lo,
                                      int hi, int sweeps);

}  // namespace moesim::sim
