// Lower bounds on stage 2 from the node structure of the fabric: which cluster pairs may share a
// rank (a matching) or a node (components that fit the nodes), for one layer pair, for windows of
// three layers, and for the whole chain. Every bound relaxes the links to the fastest intra-node and
// the fastest inter-node cost.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include "sim/placement/moetuner_stage2.hpp"

namespace moesim::sim {

namespace {

// Do the cluster pairs of `t` that would cost more than `limit` on one rank form a matching (a
// cluster shares its rank with one cluster of the other layer only)?
bool heavy_pairs_form_matching(const std::vector<double>& t, std::size_t G, double same_rank, double limit) {
  std::vector<int> row(G, -1), col(G, -1);
  for (std::size_t i = 0; i < G * G; ++i) {
    if (!(t[i] * same_rank > limit)) continue;
    const auto a = i / G, b = i % G;
    if ((row[a] >= 0 && row[a] != static_cast<int>(b)) || (col[b] >= 0 && col[b] != static_cast<int>(a))) return false;
    row[a] = static_cast<int>(b);
    col[b] = static_cast<int>(a);
  }
  return true;
}

// Two nodes: some set of components (clusters per layer in each) fills the first node exactly, `cap`
// clusters of each layer (the rest then fills the second).
bool fills_first_node(const std::vector<std::pair<int, int>>& parts, int cap) {
  const auto W = static_cast<std::size_t>(cap + 1);
  std::vector<char> reach(W * W, 0);
  reach[0] = 1;
  for (const auto& [a, b] : parts)
    for (int x = cap; x >= a; --x)
      for (int y = cap; y >= b; --y)
        if (reach[static_cast<std::size_t>(x - a) * W + static_cast<std::size_t>(y - b)])
          reach[static_cast<std::size_t>(x) * W + static_cast<std::size_t>(y)] = 1;
  return reach[static_cast<std::size_t>(cap) * W + static_cast<std::size_t>(cap)] != 0;
}

// The same over three layers.
bool fills_first_node(const std::vector<std::array<int, 3>>& parts, int cap) {
  const auto W = static_cast<std::size_t>(cap + 1);
  std::vector<char> reach(W * W * W, 0);
  reach[0] = 1;
  for (const auto& c : parts)
    for (int x = cap; x >= c[0]; --x)
      for (int y = cap; y >= c[1]; --y)
        for (int z = cap; z >= c[2]; --z)
          if (reach[(static_cast<std::size_t>(x - c[0]) * W + static_cast<std::size_t>(y - c[1])) * W +
                    static_cast<std::size_t>(z - c[2])])
            reach[(static_cast<std::size_t>(x) * W + static_cast<std::size_t>(y)) * W + static_cast<std::size_t>(z)] =
                1;
  return reach[(static_cast<std::size_t>(cap) * W + static_cast<std::size_t>(cap)) * W +
               static_cast<std::size_t>(cap)] != 0;
}

// Can every cluster pair of layer pair `l` be placed so that no pair costs more than `limit`, with
// every intra-node link at the fastest intra-node cost and every inter-node one at the fastest
// inter-node cost (a relaxation; exact for a uniform two-level fabric with at most two nodes)?
bool pair_threshold_feasible(const std::vector<double>& t, std::size_t G, const Stage2Fabric& f, double limit) {
  if (!heavy_pairs_form_matching(t, G, std::min(f.fast, f.slow), limit)) return false;
  if (f.node_size.size() < 2) return true;
  // Pairs too heavy to cross nodes tie their clusters to one node: components of that graph must
  // fill the nodes exactly (node n holds node_size[n] clusters of each layer).
  ClusterSets sets(2 * G);
  for (std::size_t i = 0; i < G * G; ++i)
    if (t[i] * f.slow > limit) sets.join(i / G, G + i % G);
  std::vector<int> left(2 * G, 0), right(2 * G, 0);
  for (std::size_t v = 0; v < 2 * G; ++v) (v < G ? left : right)[sets.find(v)] += 1;
  const int biggest = *std::max_element(f.node_size.begin(), f.node_size.end());
  std::vector<std::pair<int, int>> parts;
  for (std::size_t v = 0; v < 2 * G; ++v) {
    if (sets.find(v) != v) continue;
    if (left[v] > biggest || right[v] > biggest) return false;
    parts.emplace_back(left[v], right[v]);
  }
  if (f.node_size.size() > 2) return true;  // more nodes: the necessary condition above only
  return fills_first_node(parts, f.node_size[0]);
}

// The same test for layers l, l+1, l+2 at once: pair l within a, pair l+1 within b.
bool window_threshold_feasible(const std::vector<double>& t1, const std::vector<double>& t2, std::size_t G,
                               const Stage2Fabric& f, double a, double b) {
  const double same_rank = std::min(f.fast, f.slow);
  if (!heavy_pairs_form_matching(t1, G, same_rank, a) || !heavy_pairs_form_matching(t2, G, same_rank, b)) return false;
  if (f.node_size.size() < 2) return true;
  ClusterSets sets(3 * G);
  for (std::size_t i = 0; i < G * G; ++i) {
    if (t1[i] * f.slow > a) sets.join(i / G, G + i % G);
    if (t2[i] * f.slow > b) sets.join(G + i / G, 2 * G + i % G);
  }
  std::vector<std::array<int, 3>> count(3 * G, {0, 0, 0});
  for (std::size_t v = 0; v < 3 * G; ++v) ++count[sets.find(v)][v / G];
  const int biggest = *std::max_element(f.node_size.begin(), f.node_size.end());
  std::vector<std::array<int, 3>> parts;
  for (std::size_t v = 0; v < 3 * G; ++v) {
    if (sets.find(v) != v) continue;
    for (int k : count[v])
      if (k > biggest) return false;
    parts.push_back(count[v]);
  }
  if (f.node_size.size() > 2) return true;
  return fills_first_node(parts, f.node_size[0]);
}

// The limits at which feasibility can change: 0 and every traffic entry at either link cost.
std::vector<double> threshold_candidates(const std::vector<double>& t, const Stage2Fabric& f) {
  std::vector<double> c{0.0};
  for (double v : t) {
    if (!(v > 0)) continue;
    for (double k : {f.fast, f.slow})
      if (std::isfinite(k)) c.push_back(v * k);
  }
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

// The positive entries of one pair's traffic, largest first.
std::vector<std::size_t> by_traffic(const std::vector<double>& t, std::size_t G) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < G * G; ++i)
    if (t[i] > 0) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return t[a] > t[b]; });
  return order;
}

// Only G cluster pairs share a rank (a perfect matching): the first of the largest entries that
// cannot join the matching is paid at the fastest link at best.
double matching_bound(const std::vector<double>& t, std::size_t G, const std::vector<std::size_t>& order,
                      double fastest) {
  std::vector<char> row(G, 0), col(G, 0);
  for (std::size_t i : order) {
    const std::size_t a = i / G, b = i % G;
    if (row[a] || col[b]) return t[i] * fastest;
    row[a] = col[b] = 1;
  }
  return 0.0;
}

// Clusters sharing a node form blocks of at most `cap` clusters per layer: the first of the largest
// entries that would force a bigger block crosses nodes. 0 when no entry does.
double node_block_bound(const std::vector<double>& t, std::size_t G, const std::vector<std::size_t>& order, int cap,
                        double fastest_cross) {
  ClusterSets sets(2 * G);
  std::vector<int> rows(2 * G, 0), cols(2 * G, 0);
  for (std::size_t i = 0; i < G; ++i) rows[i] = 1, cols[G + i] = 1;
  for (std::size_t i : order) {
    const std::size_t a = sets.find(i / G), b = sets.find(G + i % G);
    if (a == b) continue;
    if (rows[a] + rows[b] > cap || cols[a] + cols[b] > cap) return t[i] * fastest_cross;
    sets.join_roots(a, b);
    rows[a] += rows[b];
    cols[a] += cols[b];
  }
  return 0.0;
}

}  // namespace

double stage2_pair_bound(const Stage2Problem& p, std::size_t l) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const auto& t = p.traffic.at(l);
  double fastest = std::numeric_limits<double>::infinity(), fastest_cross = std::numeric_limits<double>::infinity();
  std::vector<int> per_node;
  for (std::size_t a = 0; a < G; ++a) {
    const auto n = static_cast<std::size_t>(p.node[a]);
    if (per_node.size() <= n) per_node.resize(n + 1, 0);
    ++per_node[n];
    for (std::size_t b = 0; b < G; ++b) {
      if (a == b) continue;
      fastest = std::min(fastest, p.cost[a * G + b]);
      if (p.node[a] != p.node[b]) fastest_cross = std::min(fastest_cross, p.cost[a * G + b]);
    }
  }
  if (G < 2) return 0.0;
  const std::vector<std::size_t> order = by_traffic(t, G);
  double bound = matching_bound(t, G, order, fastest);
  const int cap = per_node.empty() ? static_cast<int>(G) : *std::max_element(per_node.begin(), per_node.end());
  if (std::isfinite(fastest_cross) && cap < static_cast<int>(G))
    bound = std::max(bound, node_block_bound(t, G, order, cap, fastest_cross));
  return std::max(bound, stage2_pair_threshold_bound(p, l));
}

double stage2_pair_threshold_bound(const Stage2Problem& p, std::size_t l) {
  const auto G = static_cast<std::size_t>(p.ranks);
  if (G < 2) return 0.0;
  const auto& t = p.traffic.at(l);
  const Stage2Fabric f = stage2_fabric(p);
  const std::vector<double> candidates = threshold_candidates(t, f);
  // Feasibility grows with the limit and the largest candidate is always feasible.
  std::size_t lo = 0, hi = candidates.size() - 1;
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (pair_threshold_feasible(t, G, f, candidates[mid]))
      hi = mid;
    else
      lo = mid + 1;
  }
  return candidates[lo];
}

double stage2_window_bound(const Stage2Problem& p, std::size_t l, double alpha, double beta) {
  const auto G = static_cast<std::size_t>(p.ranks);
  if (G < 2) return 0.0;
  const auto& t1 = p.traffic.at(l);
  const auto& t2 = p.traffic.at(l + 1);
  const Stage2Fabric f = stage2_fabric(p);
  const std::vector<double> as = threshold_candidates(t1, f), bs = threshold_candidates(t2, f);
  double best = std::numeric_limits<double>::infinity();
  // For each limit a of pair l, the least feasible limit b of pair l + 1 (non-increasing in a).
  std::size_t hi = bs.size() - 1;
  for (double a : as) {
    if (alpha * a >= best) break;
    if (!window_threshold_feasible(t1, t2, G, f, a, bs[hi])) continue;
    std::size_t lo = 0;
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (window_threshold_feasible(t1, t2, G, f, a, bs[mid]))
        hi = mid;
      else
        lo = mid + 1;
    }
    best = std::min(best, alpha * a + beta * bs[hi]);
  }
  return best;
}

double stage2_chain_window_bound(const Stage2Problem& p) {
  const std::size_t pairs = p.traffic.size();
  if (pairs < 2) return 0.0;
  // Overlapping windows (pairs w, w + 1), each pair's weight split over the windows holding it.
  auto windows = [&](std::size_t w) { return (w == 0 || w + 1 == pairs) ? 1.0 : 2.0; };
  double overlapping = 0.0;
  for (std::size_t w = 0; w + 1 < pairs; ++w)
    overlapping += stage2_window_bound(p, w, 1.0 / windows(w), 1.0 / windows(w + 1));
  // Disjoint windows (0, 1), (2, 3), ... and the last pair alone when the count is odd.
  double disjoint = 0.0;
  for (std::size_t w = 0; w + 1 < pairs; w += 2) disjoint += stage2_window_bound(p, w, 1.0, 1.0);
  if (pairs % 2 == 1) disjoint += stage2_pair_threshold_bound(p, pairs - 1);
  return std::max(overlapping, disjoint);
}

}  // namespace moesim::sim
