// MoETuner's stage 2 as a problem (docs/placement.md): map the clusters of each layer onto the EP
// ranks, one per rank, so that the sum over layer pairs of the slowest rank pair's transfer is least.
// Traffic is in tokens and cost in seconds per token, so objectives and volumes are in seconds.
// Plain data and pure functions; the solvers are in moetuner_stage2.hpp.
#pragma once

#include <cstddef>
#include <limits>
#include <numeric>
#include <vector>

namespace moesim::sim {

// traffic[l][c1 * G + c2]: tokens from cluster c1 of layer l to cluster c2 of layer l + 1;
// cost[g1 * G + g2]: seconds per token from rank g1 to g2 (0 on the diagonal); sizes[l][c]: experts
// in the cluster; node[g]: the node of rank g.
struct Stage2Problem {
  int ranks = 0;
  std::vector<std::vector<double>> traffic;
  std::vector<double> cost;
  std::vector<std::vector<int>> sizes;
  std::vector<int> node;
};

// A layout of one layer is cluster_on[g], the cluster rank g holds (a permutation of 0..G-1).
double stage2_pair_objective(const Stage2Problem& p, std::size_t l, const std::vector<int>& from,
                             const std::vector<int>& to);
double stage2_objective(const Stage2Problem& p, const std::vector<std::vector<int>>& cluster_on);
// The tie-break's measure (docs/placement.md): the total transfer time of the layout, sum over layer
// pairs and rank pairs g1 != g2 of traffic x cost, the sum to the objective's maximum.
double stage2_pair_volume(const Stage2Problem& p, std::size_t l, const std::vector<int>& from,
                          const std::vector<int>& to);
double stage2_volume(const Stage2Problem& p, const std::vector<std::vector<int>>& cluster_on);

// Every layout of one layer for G ranks, in lexicographic order (G! of them).
std::vector<std::vector<int>> all_layouts(std::size_t G);

// Disjoint sets over the clusters of adjacent layers (G apiece), for the components that heavy
// cluster pairs form in the bounds.
class ClusterSets {
 public:
  explicit ClusterSets(std::size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), std::size_t{0}); }
  std::size_t find(std::size_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  // Joins the sets whose roots are ra and rb (ra stays the root); false when they are one.
  bool join_roots(std::size_t ra, std::size_t rb) {
    if (ra == rb) return false;
    parent_[rb] = ra;
    return true;
  }
  void join(std::size_t a, std::size_t b) { join_roots(find(a), find(b)); }

 private:
  std::vector<std::size_t> parent_;
};

// The fabric as the stage-2 relaxations see it: the cheapest link inside a node and between nodes
// (s per token, infinity when there is none) and the ranks per node.
struct Stage2Fabric {
  double fast = std::numeric_limits<double>::infinity();  // cheapest seconds per token inside a node
  double slow = std::numeric_limits<double>::infinity();  // cheapest between nodes
  std::vector<int> node_size;   // ranks per node, nodes renumbered densely in order of first rank
  std::vector<int> dense_node;  // [g]
  std::vector<std::vector<std::size_t>> members;  // [n]: the ranks of dense node n, ascending
};
Stage2Fabric stage2_fabric(const Stage2Problem& p);

}  // namespace moesim::sim
