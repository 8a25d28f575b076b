// The hot-chain program (docs/placement.md): a lower bound on the whole stage that keeps the memory
// rows, for fabrics of several equal nodes. It follows the hottest cluster of each layer: while the
// hottest clusters of adjacent layers share a node, the pairs too heavy to cross nodes tie more
// clusters to that node, and the experts that node can hold in those layers shrink; its experts over
// all layers must still reach its ranks' share. A run of layers on one node therefore ends, and the
// pair where it ends pays the hot pair's crossing.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>

#include "sim/placement/moetuner_stage2.hpp"

namespace moesim::sim {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One breakpoint of a pair: at limit T (s), the most experts of layer l and of layer l + 1 that the
// node holding both hot clusters can hold.
struct Breakpoint {
  double limit, tokens;  // the limit in s and in tokens (s = tokens x slow)
  int left, right;
};

// The breakpoints of pair l, ascending in the limit, for hot clusters h (layer l) and h2 (layer l + 1)
// on one node of `node_ranks` ranks. A limit T admits a layout only if every pair heavier than T at
// the cheapest inter-node cost `slow` keeps its clusters on one node (its component holds at most
// node_ranks clusters of each layer); the node of the hot clusters then holds their components, and
// at most the largest clusters left for its other ranks.
std::vector<Breakpoint> pair_breakpoints(const Stage2Problem& p, std::size_t l, std::size_t h, std::size_t h2,
                                         int node_ranks, double slow) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const auto K = static_cast<std::size_t>(node_ranks);
  const auto& t = p.traffic[l];
  const std::vector<int>& size_l = p.sizes[l];
  const std::vector<int>& size_r = p.sizes[l + 1];
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < G * G; ++i)
    if (t[i] > 0) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return t[a] > t[b]; });
  // Clusters of each layer by size, largest first, for the node's other ranks.
  auto by_size = [&](const std::vector<int>& s) {
    std::vector<std::size_t> o(G);
    std::iota(o.begin(), o.end(), 0);
    std::stable_sort(o.begin(), o.end(), [&](std::size_t a, std::size_t b) { return s[a] > s[b]; });
    return o;
  };
  const std::vector<std::size_t> big_l = by_size(size_l), big_r = by_size(size_r);
  ClusterSets sets(2 * G);
  std::vector<std::size_t> n_left(2 * G, 0), n_right(2 * G, 0);
  for (std::size_t v = 0; v < 2 * G; ++v) (v < G ? n_left : n_right)[v] = 1;
  auto capacity = [&](const std::vector<int>& s, const std::vector<std::size_t>& big, std::size_t offset) {
    const std::size_t ha = sets.find(h), hb = sets.find(G + h2);
    int experts = 0;
    std::size_t members = 0, others = 0;
    for (std::size_t c = 0; c < G; ++c) {
      const std::size_t r = sets.find(offset + c);
      if (r == ha || r == hb) experts += s[c], ++members;
    }
    for (std::size_t k = 0; k < G && members + others < K; ++k) {
      const std::size_t r = sets.find(offset + big[k]);
      if (r == ha || r == hb) continue;
      experts += s[big[k]];
      ++others;
    }
    return experts;
  };
  // Walk the limit down the distinct pair values; at each, the pairs above it are joined.
  std::vector<Breakpoint> out;
  std::size_t at = 0;
  double limit = order.empty() ? 0.0 : t[order[0]];
  while (true) {
    while (at < order.size() && t[order[at]] > limit) {
      const std::size_t a = sets.find(order[at] / G), b = sets.find(G + order[at] % G);
      if (sets.join_roots(a, b)) {
        n_left[a] += n_left[b];
        n_right[a] += n_right[b];
      }
      ++at;
    }
    const std::size_t ha = sets.find(h), hb = sets.find(G + h2);
    const std::size_t hot_left = n_left[ha] + (hb != ha ? n_left[hb] : 0);
    const std::size_t hot_right = n_right[ha] + (hb != ha ? n_right[hb] : 0);
    bool fits = hot_left <= K && hot_right <= K;
    for (std::size_t v = 0; v < 2 * G && fits; ++v)
      if (sets.find(v) == v && (n_left[v] > K || n_right[v] > K)) fits = false;
    if (!fits) break;  // lower limits only join more
    const Breakpoint b{limit * slow, limit, capacity(size_l, big_l, 0), capacity(size_r, big_r, G)};
    if (out.empty() || out.back().left != b.left || out.back().right != b.right) out.push_back(b);
    else out.back().limit = b.limit, out.back().tokens = b.tokens;
    if (limit <= 0.0) break;
    std::size_t next = at;  // the pairs at the limit join at the next, lower one
    while (next < order.size() && !(t[order[next]] < limit)) ++next;
    limit = next < order.size() ? t[order[next]] : 0.0;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// The clusters of layers l and l + 1 that pairs heavier than `tokens` tie to the hot clusters h and h2.
void tie_to_hot(const Stage2Problem& p, std::size_t l, std::size_t h, std::size_t h2, double tokens,
                std::vector<int>& left, std::vector<int>& right) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const auto& t = p.traffic[l];
  ClusterSets sets(2 * G);
  for (std::size_t i = 0; i < G * G; ++i)
    if (t[i] > tokens) sets.join(i / G, G + i % G);
  const std::size_t ha = sets.find(h), hb = sets.find(G + h2);
  for (std::size_t v = 0; v < 2 * G; ++v) {
    const std::size_t r = sets.find(v);
    if (r != ha && r != hb) continue;
    std::vector<int>& side = v < G ? left : right;
    const int c = static_cast<int>(v < G ? v : v - G);
    if (std::find(side.begin(), side.end(), c) == side.end()) side.push_back(c);
  }
}

}  // namespace

HotChainResult stage2_hot_chain_bound(const Stage2Problem& p, int lo, int reserve, long state_limit) {
  HotChainResult out;
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = p.sizes.size();
  const Stage2Fabric f = stage2_fabric(p);
  if (L < 2 || f.node_size.size() < 2 || !std::isfinite(f.slow) || !(f.slow > 0)) return out;
  const int K = f.node_size[0];
  for (int n : f.node_size)
    if (n != K) return out;  // nodes of different sizes: not handled
  // The hottest cluster of each layer: most tokens out (the last layer: most in).
  std::vector<std::size_t> hot(L, 0);
  for (std::size_t l = 0; l < L; ++l) {
    const auto& t = p.traffic[l + 1 < L ? l : l - 1];
    std::vector<double> sum(G, 0.0);
    for (std::size_t i = 0; i < G * G; ++i) sum[l + 1 < L ? i / G : i % G] += t[i];
    hot[l] = static_cast<std::size_t>(std::max_element(sum.begin(), sum.end()) - sum.begin());
  }
  // cap[l]: the most experts any node holds in layer l; the slack a node has over its ranks' share.
  std::vector<int> cap(L, 0);
  long slack = -static_cast<long>(K) * lo;
  for (std::size_t l = 0; l < L; ++l) {
    std::vector<int> s = p.sizes[l];
    std::sort(s.begin(), s.end(), std::greater<>());
    cap[l] = std::accumulate(s.begin(), s.begin() + std::min<std::ptrdiff_t>(K, static_cast<std::ptrdiff_t>(s.size())),
                             0);
    slack += cap[l];
  }
  slack -= reserve;
  if (slack < 0) return out;
  // Per pair: its breakpoints, the per-pair bound, and the cost of a run ending there.
  std::vector<std::vector<Breakpoint>> bp(L - 1);
  std::vector<double> pair_lb(L - 1), cut(L - 1);
  for (std::size_t l = 0; l + 1 < L; ++l) {
    bp[l] = pair_breakpoints(p, l, hot[l], hot[l + 1], K, f.slow);
    pair_lb[l] = stage2_pair_bound(p, l);
    cut[l] = std::max(pair_lb[l], p.traffic[l][hot[l] * G + hot[l + 1]] * f.slow);
  }
  // The values a layer's count can take: its capacity and every breakpoint's.
  std::vector<std::vector<int>> values(L);
  for (std::size_t l = 0; l < L; ++l) {
    std::vector<int>& v = values[l];
    v.push_back(cap[l]);
    if (l + 1 < L)
      for (const Breakpoint& b : bp[l]) v.push_back(b.left);
    if (l > 0)
      for (const Breakpoint& b : bp[l - 1]) v.push_back(b.right);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  const auto D = static_cast<std::size_t>(slack) + 1;
  long states = 0;
  for (const auto& v : values) states += static_cast<long>(v.size() * D);
  out.states = states;
  if (states > state_limit) return out;
  // cost[l][u * D + d]: the least cost of pairs 0..l-1 with layer l's hot node holding at most
  // values[l][u] experts there and its run so far short of capacity by d experts.
  // from[l][...]: the state it came from, or -1 - u_prev for a run that starts at l.
  std::vector<std::vector<double>> cost(L);
  std::vector<std::vector<std::int64_t>> from(L);
  for (std::size_t l = 0; l < L; ++l) {
    cost[l].assign(values[l].size() * D, kInf);
    from[l].assign(values[l].size() * D, -1);
  }
  for (std::size_t u = 0; u < values[0].size(); ++u)
    cost[0][u * D + static_cast<std::size_t>(cap[0] - values[0][u])] = 0.0;
  for (std::size_t l = 0; l + 1 < L; ++l) {
    // The least pair cost for (u, v): the lowest breakpoint holding at least both counts.
    const auto& U = values[l];
    const auto& V = values[l + 1];
    std::vector<double> pair(U.size() * V.size(), kInf);
    for (std::size_t u = 0; u < U.size(); ++u)
      for (std::size_t v = 0; v < V.size(); ++v)
        for (const Breakpoint& b : bp[l])
          if (b.left >= U[u] && b.right >= V[v]) {
            pair[u * V.size() + v] = std::max(b.limit, pair_lb[l]);
            break;
          }
    double best = kInf;
    std::int64_t best_at = -1;
    for (std::size_t s = 0; s < cost[l].size(); ++s)
      if (cost[l][s] < best) best = cost[l][s], best_at = static_cast<std::int64_t>(s);
    if (best_at < 0) return out;
    for (std::size_t v = 0; v < V.size(); ++v) {
      // A run ends at pair l: layer l + 1 starts the next.
      const std::size_t s = v * D + static_cast<std::size_t>(cap[l + 1] - V[v]);
      if (best + cut[l] < cost[l + 1][s]) {
        cost[l + 1][s] = best + cut[l];
        from[l + 1][s] = -1 - best_at;
      }
    }
    for (std::size_t u = 0; u < U.size(); ++u)
      for (std::size_t d = 0; d < D; ++d) {
        const double c0 = cost[l][u * D + d];
        if (!std::isfinite(c0)) continue;
        for (std::size_t v = 0; v < V.size(); ++v) {
          const double c = pair[u * V.size() + v];
          const std::size_t d2 = d + static_cast<std::size_t>(cap[l + 1] - V[v]);
          if (!std::isfinite(c) || d2 >= D) continue;
          const std::size_t s = v * D + d2;
          if (c0 + c < cost[l + 1][s]) {
            cost[l + 1][s] = c0 + c;
            from[l + 1][s] = static_cast<std::int64_t>(u * D + d);
          }
        }
      }
  }
  const auto& last = cost[L - 1];
  const auto it = std::min_element(last.begin(), last.end());
  if (!std::isfinite(*it)) return out;
  out.applicable = true;
  out.bound = *it;
  // The runs of the optimum: walk back, noting the pairs where a run ended.
  // Each pair of a run at its breakpoint: the clusters its limit ties to the hot node.
  std::int64_t s = it - last.begin();
  out.hold.assign(L, 0);
  out.tied.assign(L, {});
  for (std::size_t l = L - 1;; --l) {
    out.hold[l] = values[l][static_cast<std::size_t>(s) / D];
    out.tied[l].push_back(static_cast<int>(hot[l]));
    if (l == 0) break;
    const std::int64_t prev = from[l][static_cast<std::size_t>(s)];
    if (prev < 0) {
      out.cuts.push_back(l - 1);
      s = -1 - prev;
      continue;
    }
    s = prev;
    const int u = values[l - 1][static_cast<std::size_t>(s) / D];
    for (const Breakpoint& b : bp[l - 1])
      if (b.left >= u && b.right >= out.hold[l]) {
        std::vector<int> left, right;
        tie_to_hot(p, l - 1, hot[l - 1], hot[l], b.tokens, left, right);
        for (int c : left) out.tied[l - 1].push_back(c);
        for (int c : right) out.tied[l].push_back(c);
        break;
      }
  }
  for (auto& t : out.tied) {
    std::sort(t.begin(), t.end());
    t.erase(std::unique(t.begin(), t.end()), t.end());
  }
  std::reverse(out.cuts.begin(), out.cuts.end());
  out.hot = std::move(hot);
  return out;
}

}  // namespace moesim::sim
