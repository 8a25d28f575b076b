#include "sim/placement/traffic.hpp"

#include <algorithm>
#include <utility>

#include "models/costs.hpp"
#include "sim/placement/routing_rule.hpp"

namespace moesim::sim {

std::vector<double> rank_token_cost(const models::Architecture& arch, const models::Cluster& cluster, int ep, int tp) {
  const double token_bytes = static_cast<double>(arch.hidden_size) * models::dtype_bytes(arch.dtype);
  const auto G = static_cast<std::size_t>(ep);
  std::vector<double> cost(G * G, 0.0);
  for (int a = 0; a < ep; ++a)
    for (int b = 0; b < ep; ++b)
      if (a != b)
        cost[static_cast<std::size_t>(a) * G + static_cast<std::size_t>(b)] =
            token_bytes / (tp * cluster.bandwidth_between(a * tp, b * tp));
  return cost;
}

Stage2Problem stage2_problem(const RoutingCounts& routing, const std::vector<std::vector<int>>& clusters,
                             const models::Architecture& arch, const models::Cluster& cluster, int ep, int tp) {
  // One cluster per expert is the replicated problem with a single copy of each (the same sums).
  std::vector<std::vector<std::vector<int>>> holders(clusters.size());
  for (std::size_t l = 0; l < clusters.size(); ++l)
    for (int c : clusters[l]) holders[l].push_back({c});
  return stage2_problem_replicated(routing, holders, arch, cluster, ep, tp);
}

Stage2Problem stage2_problem_replicated(const RoutingCounts& routing,
                                        const std::vector<std::vector<std::vector<int>>>& clusters,
                                        const models::Architecture& arch, const models::Cluster& cluster, int ep,
                                        int tp) {
  Stage2Problem p;
  p.ranks = ep;
  p.cost = rank_token_cost(arch, cluster, ep, tp);
  p.node = rank_nodes(cluster, ep, tp);
  const auto G = static_cast<std::size_t>(ep);
  const auto E = static_cast<std::size_t>(routing.num_experts);
  for (const auto& layer : clusters) {
    std::vector<int> size(G, 0);
    for (const auto& holders : layer)
      for (int c : holders) ++size.at(static_cast<std::size_t>(c));
    p.sizes.push_back(std::move(size));
  }
  // A replicated expert's traffic splits evenly over its copies, as placement_traffic_objective counts it.
  for (std::size_t l = 0; l + 1 < clusters.size(); ++l) {
    std::vector<double> t(G * G, 0.0);
    const auto& next = routing.next.at(l);
    for (std::size_t a = 0; a < E; ++a)
      for (std::size_t b = 0; b < E; ++b) {
        const double v = next[a * E + b];
        if (v == 0.0) continue;
        const auto& ha = clusters[l][a];
        const auto& hb = clusters[l + 1][b];
        const double share = v / static_cast<double>(ha.size() * hb.size());
        for (int ca : ha)
          for (int cb : hb) t[static_cast<std::size_t>(ca) * G + static_cast<std::size_t>(cb)] += share;
      }
    p.traffic.push_back(std::move(t));
  }
  return p;
}

std::vector<double> cross_layer_rank_traffic(const Placement& placement, const RoutingCounts& routing, std::size_t l) {
  const auto G = static_cast<std::size_t>(placement.ep);
  const auto E = static_cast<std::size_t>(routing.num_experts);
  std::vector<double> ranks(G * G, 0.0);
  for (std::size_t a = 0; a < E; ++a)
    for (std::size_t b = 0; b < E; ++b) {
      const double v = routing.next[l][a * E + b];
      if (v == 0.0) continue;
      const auto& ha = placement.ranks[l][a];
      const auto& hb = placement.ranks[l + 1][b];
      const double share = v / static_cast<double>(ha.size() * hb.size());
      for (int ra : ha)
        for (int rb : hb) ranks[static_cast<std::size_t>(ra) * G + static_cast<std::size_t>(rb)] += share;
    }
  return ranks;
}

double placement_traffic_objective(const Placement& placement, const RoutingCounts& routing,
                                   const models::Architecture& arch, const models::Cluster& cluster) {
  const std::vector<double> cost = rank_token_cost(arch, cluster, placement.ep, placement.tp);
  double total = 0.0;
  for (std::size_t l = 0; l + 1 < placement.ranks.size() && l < routing.next.size(); ++l) {
    const std::vector<double> ranks = cross_layer_rank_traffic(placement, routing, l);
    double worst = 0.0;
    for (std::size_t i = 0; i < ranks.size(); ++i) worst = std::max(worst, ranks[i] * cost[i]);
    total += worst;
  }
  return total;
}

}  // namespace moesim::sim
