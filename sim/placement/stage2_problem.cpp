#include "sim/placement/stage2_problem.hpp"

#include <algorithm>
#include <numeric>

namespace moesim::sim {

double stage2_pair_objective(const Stage2Problem& p, std::size_t l, const std::vector<int>& from,
                             const std::vector<int>& to) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const auto& t = p.traffic.at(l);
  double worst = 0.0;
  for (std::size_t a = 0; a < G; ++a)
    for (std::size_t b = 0; b < G; ++b)
      if (a != b)
        worst = std::max(
            worst, t[static_cast<std::size_t>(from[a]) * G + static_cast<std::size_t>(to[b])] * p.cost[a * G + b]);
  return worst;
}

double stage2_objective(const Stage2Problem& p, const std::vector<std::vector<int>>& cluster_on) {
  double s = 0.0;
  for (std::size_t l = 0; l + 1 < cluster_on.size(); ++l)
    s += stage2_pair_objective(p, l, cluster_on[l], cluster_on[l + 1]);
  return s;
}

double stage2_pair_volume(const Stage2Problem& p, std::size_t l, const std::vector<int>& from,
                          const std::vector<int>& to) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const auto& t = p.traffic.at(l);
  double sum = 0.0;
  for (std::size_t a = 0; a < G; ++a)
    for (std::size_t b = 0; b < G; ++b)
      if (a != b) sum += t[static_cast<std::size_t>(from[a]) * G + static_cast<std::size_t>(to[b])] * p.cost[a * G + b];
  return sum;
}

double stage2_volume(const Stage2Problem& p, const std::vector<std::vector<int>>& cluster_on) {
  double s = 0.0;
  for (std::size_t l = 0; l + 1 < cluster_on.size(); ++l)
    s += stage2_pair_volume(p, l, cluster_on[l], cluster_on[l + 1]);
  return s;
}

std::vector<std::vector<int>> all_layouts(std::size_t G) {
  std::vector<std::vector<int>> perms;
  std::vector<int> perm(G);
  std::iota(perm.begin(), perm.end(), 0);
  do perms.push_back(perm);
  while (std::next_permutation(perm.begin(), perm.end()));
  return perms;
}

Stage2Fabric stage2_fabric(const Stage2Problem& p) {
  const auto G = static_cast<std::size_t>(p.ranks);
  Stage2Fabric f;
  std::vector<int> seen;
  f.dense_node.resize(G);
  for (std::size_t g = 0; g < G; ++g) {
    const auto it = std::find(seen.begin(), seen.end(), p.node[g]);
    if (it == seen.end()) {
      seen.push_back(p.node[g]);
      f.node_size.push_back(0);
    }
    const auto n = static_cast<std::size_t>(std::find(seen.begin(), seen.end(), p.node[g]) - seen.begin());
    f.dense_node[g] = static_cast<int>(n);
    ++f.node_size[n];
  }
  f.members.resize(f.node_size.size());
  for (std::size_t g = 0; g < G; ++g) f.members[static_cast<std::size_t>(f.dense_node[g])].push_back(g);
  for (std::size_t a = 0; a < G; ++a)
    for (std::size_t b = 0; b < G; ++b) {
      if (a == b) continue;
      double& slot = p.node[a] == p.node[b] ? f.fast : f.slow;
      slot = std::min(slot, p.cost[a * G + b]);
    }
  return f;
}

}  // namespace moesim::sim
