// MoETuner stage 2 without GLPK (docs/placement.md): the threshold bounds for node-structured
// fabrics (which cluster pairs may share a rank or a node, for one layer pair and for windows of
// three layers), the exact layer solve given both neighbours (threshold matchings), the exact
// chain dynamic program over layers with the memory balance for up to 5 ranks, the two-node
// chain program over node sets with the memory rows summed per node, and the tie-break on total
// transfer among layouts of equal pair objectives (min-cost assignments per layer).
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "sim/placement_solvers.hpp"

namespace moesim::sim {

namespace {

struct Fabric {
  double fast = std::numeric_limits<double>::infinity();  // cheapest seconds per token inside a node
  double slow = std::numeric_limits<double>::infinity();  // cheapest between nodes
  std::vector<int> node_size;                             // ranks per node, nodes renumbered densely
  std::vector<int> dense_node;                            // [g]
};

Fabric fabric_of(const Stage2Problem& p) {
  const auto G = static_cast<std::size_t>(p.ranks);
  Fabric f;
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
  for (std::size_t a = 0; a < G; ++a)
    for (std::size_t b = 0; b < G; ++b) {
      if (a == b) continue;
      double& slot = p.node[a] == p.node[b] ? f.fast : f.slow;
      slot = std::min(slot, p.cost[a * G + b]);
    }
  return f;
}

// Can every cluster pair of layer pair `l` be placed so that no pair costs more than `limit`, with
// every intra-node link at the fastest intra-node cost and every inter-node one at the fastest
// inter-node cost (a relaxation; exact for a uniform two-level fabric with at most two nodes)?
bool pair_threshold_feasible(const std::vector<double>& t, std::size_t G, const Fabric& f, double limit) {
  const double same_rank = std::min(f.fast, f.slow);
  std::vector<int> row(G, -1), col(G, -1);
  for (std::size_t i = 0; i < G * G; ++i) {
    if (!(t[i] * same_rank > limit)) continue;
    const auto a = i / G, b = i % G;
    // A cluster shares its rank with one cluster of the other layer only.
    if ((row[a] >= 0 && row[a] != static_cast<int>(b)) || (col[b] >= 0 && col[b] != static_cast<int>(a))) return false;
    row[a] = static_cast<int>(b);
    col[b] = static_cast<int>(a);
  }
  if (f.node_size.size() < 2) return true;
  // Pairs too heavy to cross nodes tie their clusters to one node: components of that graph must
  // fill the nodes exactly (node n holds node_size[n] clusters of each layer).
  std::vector<std::size_t> parent(2 * G);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](std::size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (std::size_t i = 0; i < G * G; ++i)
    if (t[i] * f.slow > limit) {
      const std::size_t a = find(i / G), b = find(G + i % G);
      if (a != b) parent[b] = a;
    }
  std::vector<int> left(2 * G, 0), right(2 * G, 0);
  for (std::size_t v = 0; v < 2 * G; ++v) (v < G ? left : right)[find(v)] += 1;
  const int biggest = *std::max_element(f.node_size.begin(), f.node_size.end());
  std::vector<std::pair<int, int>> parts;
  for (std::size_t v = 0; v < 2 * G; ++v) {
    if (find(v) != v) continue;
    if (left[v] > biggest || right[v] > biggest) return false;
    parts.emplace_back(left[v], right[v]);
  }
  if (f.node_size.size() > 2) return true;  // more nodes: the necessary condition above only
  // Two nodes: some set of components fills node 0 exactly (the rest then fills node 1).
  const int cap = f.node_size[0];
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

// The same test for layers l, l+1, l+2 at once: pair l within a, pair l+1 within b.
bool window_threshold_feasible(const std::vector<double>& t1, const std::vector<double>& t2, std::size_t G,
                               const Fabric& f, double a, double b) {
  for (const auto& [t, limit] : {std::pair{&t1, a}, std::pair{&t2, b}}) {
    const double same_rank = std::min(f.fast, f.slow);
    std::vector<int> row(G, -1), col(G, -1);
    for (std::size_t i = 0; i < G * G; ++i) {
      if (!((*t)[i] * same_rank > limit)) continue;
      const auto x = i / G, y = i % G;
      if ((row[x] >= 0 && row[x] != static_cast<int>(y)) || (col[y] >= 0 && col[y] != static_cast<int>(x)))
        return false;
      row[x] = static_cast<int>(y);
      col[y] = static_cast<int>(x);
    }
  }
  if (f.node_size.size() < 2) return true;
  std::vector<std::size_t> parent(3 * G);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](std::size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (std::size_t i = 0; i < G * G; ++i) {
    if (t1[i] * f.slow > a) {
      const std::size_t x = find(i / G), y = find(G + i % G);
      if (x != y) parent[y] = x;
    }
    if (t2[i] * f.slow > b) {
      const std::size_t x = find(G + i / G), y = find(2 * G + i % G);
      if (x != y) parent[y] = x;
    }
  }
  std::vector<std::array<int, 3>> count(3 * G, {0, 0, 0});
  for (std::size_t v = 0; v < 3 * G; ++v) ++count[find(v)][v / G];
  const int biggest = *std::max_element(f.node_size.begin(), f.node_size.end());
  std::vector<std::array<int, 3>> parts;
  for (std::size_t v = 0; v < 3 * G; ++v) {
    if (find(v) != v) continue;
    for (int k : count[v])
      if (k > biggest) return false;
    parts.push_back(count[v]);
  }
  if (f.node_size.size() > 2) return true;
  const int cap = f.node_size[0];
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

std::vector<double> threshold_candidates(const std::vector<double>& t, const Fabric& f) {
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

}  // namespace

double stage2_window_bound(const Stage2Problem& p, std::size_t l, double alpha, double beta) {
  const auto G = static_cast<std::size_t>(p.ranks);
  if (G < 2) return 0.0;
  const auto& t1 = p.traffic.at(l);
  const auto& t2 = p.traffic.at(l + 1);
  const Fabric f = fabric_of(p);
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

double stage2_pair_threshold_bound(const Stage2Problem& p, std::size_t l) {
  const auto G = static_cast<std::size_t>(p.ranks);
  if (G < 2) return 0.0;
  const auto& t = p.traffic.at(l);
  const Fabric f = fabric_of(p);
  std::vector<double> candidates{0.0};
  for (double v : t) {
    if (!(v > 0)) continue;
    for (double c : {f.fast, f.slow})
      if (std::isfinite(c)) candidates.push_back(v * c);
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
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

namespace {

// Perfect matchings of clusters to ranks over the entries with allowed, left <= a and right <= b,
// kept up to date as a grows and b shrinks (Kuhn's augmenting paths).
class ThresholdMatching {
 public:
  ThresholdMatching(std::size_t G, const std::vector<double>& left, const std::vector<double>& right,
                    const std::vector<char>& allowed)
      : G_(G), left_(left), right_(right), allowed_(allowed), rank_of_(G, -1), cluster_on_(G, -1), seen_(G, 0) {}
  void set(double a, double b) {
    a_ = a;
    b_ = b;
    for (std::size_t c = 0; c < G_; ++c) {
      const int g = rank_of_[c];
      if (g >= 0 && !usable(c, static_cast<std::size_t>(g))) {
        cluster_on_[static_cast<std::size_t>(g)] = -1;
        rank_of_[c] = -1;
      }
    }
  }
  bool complete() {
    for (std::size_t c = 0; c < G_; ++c) {
      if (rank_of_[c] >= 0) continue;
      std::fill(seen_.begin(), seen_.end(), 0);
      if (!augment(c)) return false;
    }
    return true;
  }
  const std::vector<int>& cluster_on() const { return cluster_on_; }

 private:
  bool usable(std::size_t c, std::size_t g) const {
    const std::size_t i = c * G_ + g;
    return allowed_[i] && left_[i] <= a_ && right_[i] <= b_;
  }
  bool augment(std::size_t c) {
    for (std::size_t g = 0; g < G_; ++g) {
      if (seen_[g] || !usable(c, g)) continue;
      seen_[g] = 1;
      const int holder = cluster_on_[g];
      if (holder < 0 || augment(static_cast<std::size_t>(holder))) {
        cluster_on_[g] = static_cast<int>(c);
        rank_of_[c] = static_cast<int>(g);
        return true;
      }
    }
    return false;
  }
  std::size_t G_;
  const std::vector<double>& left_;
  const std::vector<double>& right_;
  const std::vector<char>& allowed_;
  std::vector<int> rank_of_, cluster_on_;
  std::vector<char> seen_;
  double a_ = 0.0, b_ = 0.0;
};

std::vector<double> distinct_values(const std::vector<double>& w, const std::vector<char>& allowed) {
  std::vector<double> v;
  for (std::size_t i = 0; i < w.size(); ++i)
    if (allowed[i]) v.push_back(w[i]);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

std::vector<int> stage2_layer_exact(std::size_t G, const std::vector<double>* left, const std::vector<double>* right,
                                    const std::vector<char>& allowed) {
  const std::vector<double> zero(G * G, 0.0);
  const std::vector<double>& wl = left ? *left : zero;
  const std::vector<double>& wr = right ? *right : zero;
  if (wl.size() != G * G || wr.size() != G * G || allowed.size() != G * G)
    throw std::logic_error("stage2_layer_exact: sizes");
  const std::vector<double> as = distinct_values(wl, allowed);
  const std::vector<double> bs = distinct_values(wr, allowed);  // ascending; b walks down from the top
  if (as.empty() || bs.empty()) return {};
  ThresholdMatching m(G, wl, wr, allowed);
  std::size_t j = bs.size() - 1;
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> best_on;
  for (double a : as) {
    if (a >= best) break;
    m.set(a, bs[j]);
    if (!m.complete()) continue;
    // Lower b while a perfect matching survives; b only ever goes down as a goes up.
    while (j > 0) {
      m.set(a, bs[j - 1]);
      if (m.complete()) {
        --j;
        continue;
      }
      m.set(a, bs[j]);
      m.complete();  // feasible at the previous b: restores a perfect matching
      break;
    }
    if (a + bs[j] < best) {
      best = a + bs[j];
      best_on = m.cluster_on();
    }
  }
  return best_on;
}

ChainDpResult stage2_chain_dp(const Stage2Problem& p, int lo, int hi, double incumbent, long entry_limit) {
  ChainDpResult out;
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = p.sizes.size();
  if (G < 1 || G > 5 || L == 0) return out;
  std::vector<std::vector<int>> perms;
  {
    std::vector<int> perm(G);
    std::iota(perm.begin(), perm.end(), 0);
    do perms.push_back(perm);
    while (std::next_permutation(perm.begin(), perm.end()));
  }
  const std::size_t P = perms.size();
  long max_total = 0;
  for (const auto& s : p.sizes) max_total += *std::max_element(s.begin(), s.end());
  if (max_total > 65535) return out;  // counts are packed in 16 bits

  // pair[l][i * P + j]: the pair objective with layouts i and j; togo[l][i]: the cheapest rest of the
  // chain from layout i of layer l without the memory rows (prunes, exactly, against the incumbent).
  std::vector<std::vector<double>> pair(L > 0 ? L - 1 : 0, std::vector<double>(P * P));
  for (std::size_t l = 0; l + 1 < L; ++l)
    for (std::size_t i = 0; i < P; ++i)
      for (std::size_t j = 0; j < P; ++j) pair[l][i * P + j] = stage2_pair_objective(p, l, perms[i], perms[j]);
  std::vector<std::vector<double>> togo(L, std::vector<double>(P, 0.0));
  for (std::size_t l = L - 1; l-- > 0;)
    for (std::size_t i = 0; i < P; ++i) {
      double best = std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < P; ++j) best = std::min(best, pair[l][i * P + j] + togo[l + 1][j]);
      togo[l][i] = best;
    }
  // Experts each rank may still receive after layer l.
  std::vector<int> rest_min(L, 0), rest_max(L, 0);
  for (std::size_t l = L - 1; l-- > 0;) {
    rest_min[l] = rest_min[l + 1] + *std::min_element(p.sizes[l + 1].begin(), p.sizes[l + 1].end());
    rest_max[l] = rest_max[l + 1] + *std::max_element(p.sizes[l + 1].begin(), p.sizes[l + 1].end());
  }
  const bool prune = std::isfinite(incumbent);
  const double cutoff = incumbent + 1e-9 * std::max(1e-300, std::fabs(incumbent));

  using Counts = std::array<int, 5>;
  auto key_of = [&](const Counts& c) {
    std::uint64_t k = 0;
    for (std::size_t g = 0; g + 1 < G; ++g) k = (k << 16) | static_cast<std::uint64_t>(c[g]);
    return k;
  };
  auto admissible = [&](const Counts& c, std::size_t l) {
    for (std::size_t g = 0; g < G; ++g)
      if (c[g] + rest_min[l] > hi || c[g] + rest_max[l] < lo) return false;
    return true;
  };
  struct Layer {
    std::vector<Counts> counts;
    std::vector<double> cost;        // [state * P + layout]
    std::vector<std::int32_t> from;  // previous layer's state * P + layout, -1 at layer 0
  };
  std::vector<Layer> layers(L);
  long entries = 0;
  auto add_state = [&](Layer& layer, std::unordered_map<std::uint64_t, std::size_t>& index, const Counts& c) {
    const auto [it, inserted] = index.try_emplace(key_of(c), layer.counts.size());
    if (inserted) {
      layer.counts.push_back(c);
      layer.cost.resize(layer.cost.size() + P, std::numeric_limits<double>::infinity());
      layer.from.resize(layer.from.size() + P, -1);
      entries += static_cast<long>(P);
    }
    return it->second;
  };

  // Layer 0: one layout per orbit of the rank permutations that keep every link's cost (relabelling
  // the ranks of every layer at once by such a permutation changes neither objective nor balance).
  std::vector<std::vector<int>> automorphisms;
  for (const auto& s : perms) {
    bool keeps = true;
    for (std::size_t a = 0; a < G && keeps; ++a)
      for (std::size_t b = 0; b < G && keeps; ++b)
        keeps = p.cost[static_cast<std::size_t>(s[a]) * G + static_cast<std::size_t>(s[b])] == p.cost[a * G + b];
    if (keeps) automorphisms.push_back(s);
  }
  {
    std::unordered_map<std::uint64_t, std::size_t> index;
    for (std::size_t i = 0; i < P; ++i) {
      bool canonical = true;
      for (const auto& s : automorphisms) {
        std::vector<int> moved(G);
        for (std::size_t g = 0; g < G; ++g) moved[static_cast<std::size_t>(s[g])] = perms[i][g];
        if (moved < perms[i]) {
          canonical = false;
          break;
        }
      }
      if (!canonical || (prune && togo[0][i] > cutoff)) continue;
      Counts c{};
      for (std::size_t g = 0; g < G; ++g) c[g] = p.sizes[0][static_cast<std::size_t>(perms[i][g])];
      if (!admissible(c, 0)) continue;
      const std::size_t s = add_state(layers[0], index, c);
      layers[0].cost[s * P + i] = 0.0;
    }
  }
  std::vector<double> best(P);
  std::vector<std::size_t> arg(P);
  for (std::size_t l = 0; l + 1 < L; ++l) {
    std::unordered_map<std::uint64_t, std::size_t> index;
    Layer& cur = layers[l];
    Layer& next = layers[l + 1];
    for (std::size_t s = 0; s < cur.counts.size(); ++s) {
      std::fill(best.begin(), best.end(), std::numeric_limits<double>::infinity());
      for (std::size_t i = 0; i < P; ++i) {
        const double c0 = cur.cost[s * P + i];
        if (!std::isfinite(c0)) continue;
        const double* row = &pair[l][i * P];
        for (std::size_t j = 0; j < P; ++j)
          if (c0 + row[j] < best[j]) best[j] = c0 + row[j], arg[j] = i;
      }
      for (std::size_t j = 0; j < P; ++j) {
        if (!std::isfinite(best[j]) || (prune && best[j] + togo[l + 1][j] > cutoff)) continue;
        Counts c = cur.counts[s];
        for (std::size_t g = 0; g < G; ++g) c[g] += p.sizes[l + 1][static_cast<std::size_t>(perms[j][g])];
        if (!admissible(c, l + 1)) continue;
        const std::size_t t = add_state(next, index, c);
        if (entries > entry_limit || entries >= std::numeric_limits<std::int32_t>::max()) return out;
        if (best[j] < next.cost[t * P + j]) {
          next.cost[t * P + j] = best[j];
          next.from[t * P + j] = static_cast<std::int32_t>(s * P + arg[j]);
        }
      }
    }
  }
  out.completed = true;
  out.entries = entries;
  const Layer& last = layers[L - 1];
  std::int64_t at = -1;
  double found = std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < last.cost.size(); ++k)
    if (last.cost[k] < found) found = last.cost[k], at = static_cast<std::int64_t>(k);
  if (at < 0) return out;  // no balanced layout at or below the incumbent
  out.feasible = true;
  out.objective = found;
  out.cluster_on.assign(L, {});
  for (std::size_t l = L; l-- > 0;) {
    const auto k = static_cast<std::size_t>(at);
    out.cluster_on[l] = perms[k % P];
    at = layers[l].from[k];
  }
  return out;
}


namespace {

// One layer pair of the two-node relaxation: cost(S, S') is the heaviest traffic between a cluster of
// layer l on one node and a cluster of layer l + 1 on the other, times the cheapest inter-node cost.
// It is at most T exactly when every pair heavier than T keeps its two clusters on one node, that is
// when each component of those pairs lies wholly on one side. Walking T down the distinct pair
// values, a set S of layer l and a set S' of layer l + 1 are compatible at T when they place every
// component on the same side: the same key (one bit per component), -1 for a set that splits one.
class PairLimits {
 public:
  PairLimits(const std::vector<double>& traffic, std::size_t G, double slow)
      : G_(G), t_(traffic), slow_(slow), parent_(2 * G), size_(2 * G, 1) {
    for (std::size_t i = 0; i < G * G; ++i)
      if (t_[i] > 0) order_.push_back(i);
    std::sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) { return t_[a] > t_[b]; });
    std::iota(parent_.begin(), parent_.end(), 0);
  }
  // The next limit, descending: the first call gives the largest pair value (no pair above it), the
  // last 0. False once every limit has been visited.
  bool next() {
    if (started_) {
      if (at_ >= order_.size()) return false;
      const double v = t_[order_[at_]];
      while (at_ < order_.size() && t_[order_[at_]] == v) {
        const std::size_t i = order_[at_++];
        unite(i / G_, G_ + i % G_);
      }
    }
    started_ = true;
    limit_ = at_ < order_.size() ? t_[order_[at_]] * slow_ : 0.0;
    left_.clear();
    right_.clear();
    std::vector<int> slot(2 * G_, -1);
    for (std::size_t v = 0; v < 2 * G_; ++v) {
      const std::size_t r = find(v);
      if (size_[r] < 2) continue;
      if (slot[r] < 0) {
        slot[r] = static_cast<int>(left_.size());
        left_.push_back(0);
        right_.push_back(0);
      }
      (v < G_ ? left_ : right_)[static_cast<std::size_t>(slot[r])] |= 1u << (v % G_);
    }
    return true;
  }
  double limit() const { return limit_; }
  std::size_t components() const { return left_.size(); }
  std::int64_t key(std::uint32_t set, bool left) const {
    const auto& comp = left ? left_ : right_;
    std::int64_t k = 0;
    for (std::size_t j = 0; j < comp.size(); ++j) {
      const std::uint32_t in = set & comp[j];
      if (in == comp[j])
        k |= std::int64_t{1} << j;
      else if (in != 0)
        return -1;
    }
    return k;
  }

 private:
  std::size_t find(std::size_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  void unite(std::size_t a, std::size_t b) {
    a = find(a);
    b = find(b);
    if (a == b) return;
    parent_[b] = a;
    size_[a] += size_[b];
  }
  std::size_t G_;
  const std::vector<double>& t_;
  double slow_;
  std::vector<std::size_t> order_, parent_, size_;
  std::size_t at_ = 0;
  bool started_ = false;
  double limit_ = 0.0;
  std::vector<std::uint32_t> left_, right_;
};

constexpr double kInf = std::numeric_limits<double>::infinity();

// out[s'] = min over s of in[s] + cost(s, s') (forward: s of layer l, s' of layer l + 1; backward the
// other way round), by the limits of PairLimits; arg[s'] the minimising s.
void relax_pair(const std::vector<double>& traffic, std::size_t G, double slow, const std::vector<std::uint32_t>& sets,
                const std::vector<double>& in, bool forward, std::vector<double>& out, std::vector<std::int32_t>& arg) {
  const std::size_t M = sets.size();
  out.assign(M, kInf);
  arg.assign(M, -1);
  PairLimits limits(traffic, G, slow);
  std::vector<double> best;
  std::vector<std::int32_t> best_at;
  std::vector<std::int64_t> touched;
  while (limits.next()) {
    const double T = limits.limit();
    const std::size_t keys = std::size_t{1} << limits.components();
    if (best.size() < keys) best.resize(keys, kInf), best_at.resize(keys, -1);
    for (std::int64_t k : touched) best[static_cast<std::size_t>(k)] = kInf;
    touched.clear();
    for (std::size_t s = 0; s < M; ++s) {
      if (!std::isfinite(in[s])) continue;
      const std::int64_t k = limits.key(sets[s], forward);
      if (k < 0) continue;
      auto& b = best[static_cast<std::size_t>(k)];
      if (!std::isfinite(b)) touched.push_back(k);
      if (in[s] < b) b = in[s], best_at[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(s);
    }
    if (touched.empty()) break;  // no set is compatible at T, nor at any smaller limit
    for (std::size_t s = 0; s < M; ++s) {
      const std::int64_t k = limits.key(sets[s], !forward);
      if (k < 0) continue;
      const double v = best[static_cast<std::size_t>(k)] + T;
      if (v < out[s]) out[s] = v, arg[s] = best_at[static_cast<std::size_t>(k)];
    }
  }
}

// Clusters of each node to that node's ranks, every rank's experts over all layers kept near
// [lo, hi]: layers by decreasing spread of sizes, largest cluster to the emptiest rank, then swaps of
// two ranks' clusters in one layer that narrow the node's range.
std::vector<std::vector<int>> layout_from_sets(const Stage2Problem& p, const std::vector<int>& dense_node,
                                               const std::vector<std::uint32_t>& first, int lo, int hi) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = first.size();
  std::vector<std::vector<int>> on(L, std::vector<int>(G, -1));
  for (int n = 0; n < 2; ++n) {
    std::vector<std::size_t> ranks;
    for (std::size_t g = 0; g < G; ++g)
      if (dense_node[g] == n) ranks.push_back(g);
    std::vector<std::vector<std::size_t>> members(L);
    for (std::size_t l = 0; l < L; ++l)
      for (std::size_t c = 0; c < G; ++c)
        if ((((first[l] >> c) & 1u) != 0) == (n == 0)) members[l].push_back(c);
    std::vector<std::size_t> layers(L);
    std::iota(layers.begin(), layers.end(), 0);
    auto spread = [&](std::size_t l) {
      int a = std::numeric_limits<int>::max(), b = 0;
      for (std::size_t c : members[l]) a = std::min(a, p.sizes[l][c]), b = std::max(b, p.sizes[l][c]);
      return b - a;
    };
    std::stable_sort(layers.begin(), layers.end(), [&](std::size_t a, std::size_t b) { return spread(a) > spread(b); });
    std::vector<int> total(G, 0);
    for (std::size_t l : layers) {
      std::vector<std::size_t> cs = members[l], rs = ranks;
      std::stable_sort(cs.begin(), cs.end(),
                       [&](std::size_t a, std::size_t b) { return p.sizes[l][a] > p.sizes[l][b]; });
      std::stable_sort(rs.begin(), rs.end(), [&](std::size_t a, std::size_t b) { return total[a] < total[b]; });
      for (std::size_t i = 0; i < cs.size(); ++i) {
        on[l][rs[i]] = static_cast<int>(cs[i]);
        total[rs[i]] += p.sizes[l][cs[i]];
      }
    }
    auto size_on = [&](std::size_t l, std::size_t g) { return p.sizes[l][static_cast<std::size_t>(on[l][g])]; };
    for (int step = 0; step < 10000; ++step) {
      std::size_t gmax = ranks[0], gmin = ranks[0];
      for (std::size_t g : ranks) {
        if (total[g] > total[gmax]) gmax = g;
        if (total[g] < total[gmin]) gmin = g;
      }
      const int range = total[gmax] - total[gmin];
      if (total[gmax] <= hi && total[gmin] >= lo && range <= 1) break;
      // The swap of gmax's and gmin's clusters whose size difference is closest to half the range.
      std::size_t bl = L;
      int best = std::numeric_limits<int>::max();
      for (std::size_t l = 0; l < L; ++l) {
        const int d = size_on(l, gmax) - size_on(l, gmin);
        if (d <= 0 || d >= range) continue;
        const int score = std::abs(2 * d - range);
        if (score < best) best = score, bl = l;
      }
      if (bl == L) break;
      const int d = size_on(bl, gmax) - size_on(bl, gmin);
      std::swap(on[bl][gmax], on[bl][gmin]);
      total[gmax] -= d;
      total[gmin] += d;
    }
  }
  return on;
}

}  // namespace

TwoNodeChainResult stage2_two_node_chain(const Stage2Problem& p, int lo, int hi, double incumbent, long entry_limit) {
  TwoNodeChainResult out;
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = p.sizes.size();
  if (G < 2 || G > 16 || L < 2) return out;
  const Fabric f = fabric_of(p);
  if (f.node_size.size() != 2 || !std::isfinite(f.slow)) return out;
  out.applicable = true;
  const int n0 = f.node_size[0], n1 = f.node_size[1];
  std::vector<std::uint32_t> sets;
  for (std::uint32_t m = 0; m < (1u << G); ++m)
    if (std::popcount(m) == n0) sets.push_back(m);
  const std::size_t M = sets.size();
  // Equal nodes: swapping them in every layer changes neither cost nor the node totals' range, so
  // layer 0 may keep cluster 0 on the first node.
  std::vector<double> start(M, 0.0);
  if (n0 == n1)
    for (std::size_t s = 0; s < M; ++s)
      if ((sets[s] & 1u) == 0) start[s] = kInf;
  std::vector<std::int32_t> arg;
  // togo[l][s]: the cheapest rest of the chain from set s of layer l, node totals relaxed.
  std::vector<std::vector<double>> togo(L);
  togo[L - 1].assign(M, 0.0);
  for (std::size_t l = L - 1; l-- > 0;) relax_pair(p.traffic[l], G, f.slow, sets, togo[l + 1], false, togo[l], arg);
  out.unconstrained = kInf;
  for (std::size_t s = 0; s < M; ++s) out.unconstrained = std::min(out.unconstrained, start[s] + togo[0][s]);

  // Node totals: the first node's experts over all layers within reach of its ranks' [lo, hi] rows,
  // and the second node's as well.
  std::vector<std::vector<int>> first_size(L, std::vector<int>(M, 0));
  long all = 0;
  std::vector<int> least(L), most(L);
  for (std::size_t l = 0; l < L; ++l) {
    all += std::accumulate(p.sizes[l].begin(), p.sizes[l].end(), 0L);
    for (std::size_t s = 0; s < M; ++s)
      for (std::size_t c = 0; c < G; ++c)
        if ((sets[s] >> c) & 1u) first_size[l][s] += p.sizes[l][c];
    least[l] = *std::min_element(first_size[l].begin(), first_size[l].end());
    most[l] = *std::max_element(first_size[l].begin(), first_size[l].end());
  }
  const long want_lo = std::max(static_cast<long>(n0) * lo, all - static_cast<long>(n1) * hi);
  const long want_hi = std::min(static_cast<long>(n0) * hi, all - static_cast<long>(n1) * lo);
  std::vector<long> rest_least(L, 0), rest_most(L, 0);
  for (std::size_t l = L - 1; l-- > 0;) {
    rest_least[l] = rest_least[l + 1] + least[l + 1];
    rest_most[l] = rest_most[l + 1] + most[l + 1];
  }
  auto reachable = [&](long t, std::size_t l) { return t + rest_least[l] <= want_hi && t + rest_most[l] >= want_lo; };

  struct State {
    std::int32_t set;
    std::int32_t total;
    double cost;
    std::int32_t from;
  };
  // The program with node totals, pruned at `cutoff` with togo: exact for every chain of cost at
  // most cutoff. Returns false when the entry limit stops it.
  std::vector<std::vector<State>> layers;
  auto run = [&](double cutoff) {
    layers.assign(L, {});
    for (std::size_t s = 0; s < M; ++s)
      if (start[s] + togo[0][s] <= cutoff && reachable(first_size[0][s], 0))
        layers[0].push_back({static_cast<std::int32_t>(s), first_size[0][s], 0.0, -1});
    for (std::size_t l = 0; l + 1 < L; ++l) {
      const auto& cur = layers[l];
      auto& next = layers[l + 1];
      if (cur.empty()) return true;
      double cheapest = kInf;
      for (const State& st : cur) cheapest = std::min(cheapest, st.cost);
      double least_togo = *std::min_element(togo[l + 1].begin(), togo[l + 1].end());
      std::unordered_map<std::uint64_t, std::size_t> index;
      PairLimits limits(p.traffic[l], G, f.slow);
      // Compatible states grouped by key, sorted by (key, total).
      std::vector<std::pair<std::int64_t, std::size_t>> groups;
      while (limits.next()) {
        const double T = limits.limit();
        if (T + cheapest + least_togo > cutoff) continue;
        groups.clear();
        for (std::size_t i = 0; i < cur.size(); ++i) {
          const std::int64_t k = limits.key(sets[static_cast<std::size_t>(cur[i].set)], true);
          if (k >= 0) groups.emplace_back(k, i);
        }
        if (groups.empty()) break;
        std::sort(groups.begin(), groups.end());
        for (std::size_t s = 0; s < M; ++s) {
          const double rest = togo[l + 1][s];
          if (T + cheapest + rest > cutoff) continue;
          const std::int64_t k = limits.key(sets[s], false);
          if (k < 0) continue;
          auto it = std::lower_bound(groups.begin(), groups.end(), std::pair<std::int64_t, std::size_t>{k, 0});
          for (; it != groups.end() && it->first == k; ++it) {
            const State& from = cur[it->second];
            const double v = from.cost + T;
            if (v + rest > cutoff) continue;
            const long t = from.total + first_size[l + 1][s];
            if (!reachable(t, l + 1)) continue;
            const std::uint64_t key = static_cast<std::uint64_t>(s) << 32 | static_cast<std::uint32_t>(t);
            const auto [at, inserted] = index.try_emplace(key, next.size());
            if (inserted) {
              if (++out.entries > entry_limit) return false;
              next.push_back({static_cast<std::int32_t>(s), static_cast<std::int32_t>(t), v,
                              static_cast<std::int32_t>(it->second)});
            } else if (v < next[at->second].cost) {
              next[at->second].cost = v;
              next[at->second].from = static_cast<std::int32_t>(it->second);
            }
          }
        }
      }
    }
    return true;
  };
  // Cutoffs rising from just above the relaxed optimum: the first that admits a chain gives the exact
  // optimum with node totals (every cheaper chain survives the pruning).
  const double ceiling = std::isfinite(incumbent) ? incumbent * (1.0 + 1e-9) : kInf;
  for (double margin : {0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 3.0, kInf}) {
    const double cutoff = std::isfinite(margin) ? std::min(ceiling, out.unconstrained * (1.0 + margin)) : ceiling;
    if (!run(cutoff)) return out;
    const auto& last = layers[L - 1];
    std::size_t at = last.size();
    for (std::size_t i = 0; i < last.size(); ++i)
      if (at == last.size() || last[i].cost < last[at].cost) at = i;
    if (at < last.size()) {
      out.completed = out.feasible = true;
      out.objective = last[at].cost;
      std::vector<std::uint32_t> first(L);
      for (std::size_t l = L; l-- > 0;) {
        first[l] = sets[static_cast<std::size_t>(layers[l][at].set)];
        at = static_cast<std::size_t>(layers[l][at].from);
      }
      out.cluster_on = layout_from_sets(p, f.dense_node, first, lo, hi);
      return out;
    }
    if (cutoff >= ceiling) {
      out.completed = true;  // no chain at or below the incumbent
      return out;
    }
  }
  return out;
}


namespace {

// Min-cost perfect assignment of rows (clusters) to columns (ranks) over the allowed entries, by
// shortest augmenting paths with potentials (O(G^3)). Returns cluster_on[g], or empty when the
// allowed entries admit no perfect assignment.
std::vector<int> min_cost_assignment(std::size_t G, const std::vector<double>& cost, const std::vector<char>& allowed) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<double> u(G + 1, 0.0), v(G + 1, 0.0);
  std::vector<std::size_t> col_row(G + 1, 0), way(G + 1, 0);  // 1-based; col_row[j]: row on column j
  for (std::size_t i = 1; i <= G; ++i) {
    col_row[0] = i;
    std::size_t j0 = 0;
    std::vector<double> minv(G + 1, inf);
    std::vector<char> used(G + 1, 0);
    do {
      used[j0] = 1;
      const std::size_t i0 = col_row[j0];
      double delta = inf;
      std::size_t j1 = 0;
      for (std::size_t j = 1; j <= G; ++j) {
        if (used[j]) continue;
        const std::size_t k = (i0 - 1) * G + (j - 1);
        if (allowed[k]) {
          const double cur = cost[k] - u[i0] - v[j];
          if (cur < minv[j]) minv[j] = cur, way[j] = j0;
        }
        if (minv[j] < delta) delta = minv[j], j1 = j;
      }
      if (!std::isfinite(delta)) return {};
      for (std::size_t j = 0; j <= G; ++j)
        if (used[j]) {
          u[col_row[j]] += delta;
          v[j] -= delta;
        } else {
          minv[j] -= delta;
        }
      j0 = j1;
    } while (col_row[j0] != 0);
    do {
      const std::size_t j1 = way[j0];
      col_row[j0] = col_row[j1];
      j0 = j1;
    } while (j0 != 0);
  }
  std::vector<int> on(G, -1);
  for (std::size_t j = 1; j <= G; ++j) on[j - 1] = static_cast<int>(col_row[j] - 1);
  return on;
}

// Per cluster c and rank g of layer l, the slowest transfer (max) and the total (sum) into c on g
// from the layer before (left) or out of it to the layer after (right), the neighbour fixed.
void neighbour_weights(const Stage2Problem& p, std::size_t l, const std::vector<int>& other, bool left,
                       std::vector<double>& worst, std::vector<double>& total) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const auto& t = p.traffic[left ? l - 1 : l];
  worst.assign(G * G, 0.0);
  total.assign(G * G, 0.0);
  for (std::size_t c = 0; c < G; ++c)
    for (std::size_t g = 0; g < G; ++g) {
      double w = 0.0, s = 0.0;
      for (std::size_t h = 0; h < G; ++h) {
        if (h == g) continue;
        const auto o = static_cast<std::size_t>(other[h]);
        const double x = left ? t[o * G + c] * p.cost[h * G + g] : t[c * G + o] * p.cost[g * G + h];
        w = std::max(w, x);
        s += x;
      }
      worst[c * G + g] = w;
      total[c * G + g] = s;
    }
}

}  // namespace

double stage2_pair_volume(const Stage2Problem& p, std::size_t l, const std::vector<int>& from,
                          const std::vector<int>& to) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const auto& t = p.traffic.at(l);
  double sum = 0.0;
  for (std::size_t a = 0; a < G; ++a)
    for (std::size_t b = 0; b < G; ++b)
      if (a != b)
        sum += t[static_cast<std::size_t>(from[a]) * G + static_cast<std::size_t>(to[b])] * p.cost[a * G + b];
  return sum;
}

double stage2_volume(const Stage2Problem& p, const std::vector<std::vector<int>>& cluster_on) {
  double s = 0.0;
  for (std::size_t l = 0; l + 1 < cluster_on.size(); ++l)
    s += stage2_pair_volume(p, l, cluster_on[l], cluster_on[l + 1]);
  return s;
}

int stage2_tie_break(const Stage2Problem& p, std::vector<std::vector<int>>& cluster_on, int lo, int hi, int sweeps) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = cluster_on.size();
  if (L < 2 || G < 2) return 0;
  int changes = 0;
  std::vector<double> wl, sl, wr, sr, cost(G * G);
  std::vector<char> allowed(G * G);
  for (int sweep = 0; sweep < sweeps; ++sweep) {
    bool any = false;
    for (std::size_t k = 0; k < L; ++k) {
      const std::size_t l = sweep % 2 == 0 ? k : L - 1 - k;
      const std::vector<int>& now = cluster_on[l];
      std::vector<int> total(G, 0);
      for (std::size_t m = 0; m < L; ++m)
        for (std::size_t g = 0; g < G; ++g) total[g] += p.sizes[m][static_cast<std::size_t>(cluster_on[m][g])];
      double tl = 0.0, tr = 0.0, before = 0.0;
      if (l > 0) neighbour_weights(p, l, cluster_on[l - 1], true, wl, sl);
      if (l + 1 < L) neighbour_weights(p, l, cluster_on[l + 1], false, wr, sr);
      for (std::size_t g = 0; g < G; ++g) {
        const std::size_t i = static_cast<std::size_t>(now[g]) * G + g;
        if (l > 0) tl = std::max(tl, wl[i]), before += sl[i];
        if (l + 1 < L) tr = std::max(tr, wr[i]), before += sr[i];
      }
      for (std::size_t c = 0; c < G; ++c)
        for (std::size_t g = 0; g < G; ++g) {
          const std::size_t i = c * G + g;
          // A rank in range stays in it; one outside moves no farther out.
          const int other = total[g] - p.sizes[l][static_cast<std::size_t>(now[g])];
          const int next = other + p.sizes[l][c];
          const bool memory_ok = next >= std::min(lo, total[g]) && next <= std::max(hi, total[g]);
          const bool left_ok = l == 0 || wl[i] <= tl;
          const bool right_ok = l + 1 == L || wr[i] <= tr;
          allowed[i] = memory_ok && left_ok && right_ok ? 1 : 0;
          cost[i] = (l > 0 ? sl[i] : 0.0) + (l + 1 < L ? sr[i] : 0.0);
        }
      std::vector<int> next = min_cost_assignment(G, cost, allowed);
      if (next.empty() || next == now) continue;
      double after = 0.0;
      for (std::size_t g = 0; g < G; ++g) after += cost[static_cast<std::size_t>(next[g]) * G + g];
      // Rounding must not cycle between layouts of equal volume.
      if (after >= before - 1e-9 * before) continue;
      cluster_on[l] = std::move(next);
      ++changes;
      any = true;
    }
    if (!any) break;
  }
  return changes;
}

}  // namespace moesim::sim
