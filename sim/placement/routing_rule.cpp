#include "sim/placement/routing_rule.hpp"

namespace moesim::sim {

std::vector<int> rank_nodes(const models::Cluster& cluster, int ep, int tp) {
  std::vector<int> node(static_cast<std::size_t>(ep));
  for (int r = 0; r < ep; ++r) node[static_cast<std::size_t>(r)] = cluster.node_of(r * tp);
  return node;
}

}  // namespace moesim::sim
