// The two-node chain program (docs/placement.md): on a fabric of two nodes, the chain over layers of
// which clusters sit on the first node, every inter-node link at its cheapest cost and links inside a
// node free; first without the node totals (the cost to go), then with them under rising cutoffs.
// Its chain, spread over each node's ranks with their experts balanced, starts a descent.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <utility>

#include "sim/placement/moetuner_stage2.hpp"

namespace moesim::sim {

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

// The clusters of layer l on node n (0: those in first[l], 1: the others).
std::vector<std::vector<std::size_t>> node_members(const std::vector<std::uint32_t>& first, std::size_t G, int n) {
  std::vector<std::vector<std::size_t>> members(first.size());
  for (std::size_t l = 0; l < first.size(); ++l)
    for (std::size_t c = 0; c < G; ++c)
      if ((((first[l] >> c) & 1u) != 0) == (n == 0)) members[l].push_back(c);
  return members;
}

// Layers by decreasing spread of cluster sizes, in each the largest cluster to the emptiest rank.
void deal_node(const Stage2Problem& p, std::vector<std::vector<int>>& on, const std::vector<std::size_t>& ranks,
               const std::vector<std::vector<std::size_t>>& members, std::vector<int>& total) {
  const std::size_t L = members.size();
  std::vector<std::size_t> layers(L);
  std::iota(layers.begin(), layers.end(), 0);
  auto spread = [&](std::size_t l) {
    int a = std::numeric_limits<int>::max(), b = 0;
    for (std::size_t c : members[l]) a = std::min(a, p.sizes[l][c]), b = std::max(b, p.sizes[l][c]);
    return b - a;
  };
  std::stable_sort(layers.begin(), layers.end(), [&](std::size_t a, std::size_t b) { return spread(a) > spread(b); });
  for (std::size_t l : layers) {
    std::vector<std::size_t> cs = members[l], rs = ranks;
    std::stable_sort(cs.begin(), cs.end(), [&](std::size_t a, std::size_t b) { return p.sizes[l][a] > p.sizes[l][b]; });
    std::stable_sort(rs.begin(), rs.end(), [&](std::size_t a, std::size_t b) { return total[a] < total[b]; });
    for (std::size_t i = 0; i < cs.size(); ++i) {
      on[l][rs[i]] = static_cast<int>(cs[i]);
      total[rs[i]] += p.sizes[l][cs[i]];
    }
  }
}

// Swaps of two ranks' clusters in one layer that narrow the node's range of experts per rank, until
// it is within [lo, hi] and at most 1 wide, or no swap narrows it.
void narrow_node(const Stage2Problem& p, std::vector<std::vector<int>>& on, const std::vector<std::size_t>& ranks,
                 std::vector<int>& total, int lo, int hi) {
  const std::size_t L = on.size();
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

// Clusters of each node to that node's ranks, every rank's experts over all layers kept near [lo, hi].
std::vector<std::vector<int>> layout_from_sets(const Stage2Problem& p, const std::vector<int>& dense_node,
                                               const std::vector<std::uint32_t>& first, int lo, int hi) {
  const auto G = static_cast<std::size_t>(p.ranks);
  std::vector<std::vector<int>> on(first.size(), std::vector<int>(G, -1));
  for (int n = 0; n < 2; ++n) {
    std::vector<std::size_t> ranks;
    for (std::size_t g = 0; g < G; ++g)
      if (dense_node[g] == n) ranks.push_back(g);
    std::vector<int> total(G, 0);
    deal_node(p, on, ranks, node_members(first, G, n), total);
    narrow_node(p, on, ranks, total, lo, hi);
  }
  return on;
}

// The chain over node sets: a set is a bit mask of the clusters on the first node (n0 of them).
class TwoNodeProgram {
 public:
  TwoNodeProgram(const Stage2Problem& p, const Stage2Fabric& f, int lo, int hi);
  double unconstrained() const { return unconstrained_; }
  // Cutoffs rising from just above the relaxed optimum: the first that admits a chain gives the exact
  // optimum with node totals (every cheaper chain survives the pruning).
  void search(double incumbent, long entry_limit, TwoNodeChainResult& out);

 private:
  struct State {
    std::int32_t set;
    std::int32_t total;
    double cost;
    std::int32_t from;
  };
  void node_totals(int lo, int hi);
  bool reachable(long t, std::size_t l) const {
    return t + rest_least_[l] <= want_hi_ && t + rest_most_[l] >= want_lo_;
  }
  bool run(double cutoff, long entry_limit);
  bool advance(std::size_t l, double cutoff, long entry_limit);

  const Stage2Problem& p_;
  const Stage2Fabric& f_;
  std::size_t G_, L_;
  int n0_, n1_;
  std::vector<std::uint32_t> sets_;
  std::size_t M_ = 0;
  std::vector<double> start_;
  std::vector<std::vector<double>> togo_;  // [l][s]: the cheapest rest of the chain, node totals relaxed
  double unconstrained_ = kInf;
  std::vector<std::vector<int>> first_size_;  // [l][s]: the first node's experts in layer l
  long want_lo_ = 0, want_hi_ = 0;
  std::vector<long> rest_least_, rest_most_;
  std::vector<std::vector<State>> layers_;
  long entries_ = 0;
  int lo_, hi_;
};

TwoNodeProgram::TwoNodeProgram(const Stage2Problem& p, const Stage2Fabric& f, int lo, int hi)
    : p_(p),
      f_(f),
      G_(static_cast<std::size_t>(p.ranks)),
      L_(p.sizes.size()),
      n0_(f.node_size[0]),
      n1_(f.node_size[1]),
      lo_(lo),
      hi_(hi) {
  for (std::uint32_t m = 0; m < (1u << G_); ++m)
    if (std::popcount(m) == n0_) sets_.push_back(m);
  M_ = sets_.size();
  // Equal nodes: swapping them in every layer changes neither cost nor the node totals' range, so
  // layer 0 may keep cluster 0 on the first node.
  start_.assign(M_, 0.0);
  if (n0_ == n1_)
    for (std::size_t s = 0; s < M_; ++s)
      if ((sets_[s] & 1u) == 0) start_[s] = kInf;
  std::vector<std::int32_t> arg;
  togo_.assign(L_, {});
  togo_[L_ - 1].assign(M_, 0.0);
  for (std::size_t l = L_ - 1; l-- > 0;)
    relax_pair(p.traffic[l], G_, f.slow, sets_, togo_[l + 1], false, togo_[l], arg);
  for (std::size_t s = 0; s < M_; ++s) unconstrained_ = std::min(unconstrained_, start_[s] + togo_[0][s]);
  node_totals(lo, hi);
}

// The first node's experts over all layers within reach of its ranks' [lo, hi] rows, and the second
// node's as well.
void TwoNodeProgram::node_totals(int lo, int hi) {
  first_size_.assign(L_, std::vector<int>(M_, 0));
  long all = 0;
  std::vector<int> least(L_), most(L_);
  for (std::size_t l = 0; l < L_; ++l) {
    all += std::accumulate(p_.sizes[l].begin(), p_.sizes[l].end(), 0L);
    for (std::size_t s = 0; s < M_; ++s)
      for (std::size_t c = 0; c < G_; ++c)
        if ((sets_[s] >> c) & 1u) first_size_[l][s] += p_.sizes[l][c];
    least[l] = *std::min_element(first_size_[l].begin(), first_size_[l].end());
    most[l] = *std::max_element(first_size_[l].begin(), first_size_[l].end());
  }
  want_lo_ = std::max(static_cast<long>(n0_) * lo, all - static_cast<long>(n1_) * hi);
  want_hi_ = std::min(static_cast<long>(n0_) * hi, all - static_cast<long>(n1_) * lo);
  rest_least_.assign(L_, 0);
  rest_most_.assign(L_, 0);
  for (std::size_t l = L_ - 1; l-- > 0;) {
    rest_least_[l] = rest_least_[l + 1] + least[l + 1];
    rest_most_[l] = rest_most_[l + 1] + most[l + 1];
  }
}

// The program with node totals, pruned at `cutoff` with togo: exact for every chain of cost at most
// cutoff. Returns false when the entry limit stops it.
bool TwoNodeProgram::run(double cutoff, long entry_limit) {
  layers_.assign(L_, {});
  for (std::size_t s = 0; s < M_; ++s)
    if (start_[s] + togo_[0][s] <= cutoff && reachable(first_size_[0][s], 0))
      layers_[0].push_back({static_cast<std::int32_t>(s), first_size_[0][s], 0.0, -1});
  for (std::size_t l = 0; l + 1 < L_; ++l) {
    if (layers_[l].empty()) return true;
    if (!advance(l, cutoff, entry_limit)) return false;
  }
  return true;
}

// The states of layer l + 1 from those of layer l, by the limits of PairLimits (compatible states
// grouped by key, sorted by (key, total)).
bool TwoNodeProgram::advance(std::size_t l, double cutoff, long entry_limit) {
  const auto& cur = layers_[l];
  auto& next = layers_[l + 1];
  double cheapest = kInf;
  for (const State& st : cur) cheapest = std::min(cheapest, st.cost);
  double least_togo = *std::min_element(togo_[l + 1].begin(), togo_[l + 1].end());
  std::unordered_map<std::uint64_t, std::size_t> index;
  PairLimits limits(p_.traffic[l], G_, f_.slow);
  std::vector<std::pair<std::int64_t, std::size_t>> groups;
  while (limits.next()) {
    const double T = limits.limit();
    if (T + cheapest + least_togo > cutoff) continue;
    groups.clear();
    for (std::size_t i = 0; i < cur.size(); ++i) {
      const std::int64_t k = limits.key(sets_[static_cast<std::size_t>(cur[i].set)], true);
      if (k >= 0) groups.emplace_back(k, i);
    }
    if (groups.empty()) break;
    std::sort(groups.begin(), groups.end());
    for (std::size_t s = 0; s < M_; ++s) {
      const double rest = togo_[l + 1][s];
      if (T + cheapest + rest > cutoff) continue;
      const std::int64_t k = limits.key(sets_[s], false);
      if (k < 0) continue;
      auto it = std::lower_bound(groups.begin(), groups.end(), std::pair<std::int64_t, std::size_t>{k, 0});
      for (; it != groups.end() && it->first == k; ++it) {
        const State& from = cur[it->second];
        const double v = from.cost + T;
        if (v + rest > cutoff) continue;
        const long t = from.total + first_size_[l + 1][s];
        if (!reachable(t, l + 1)) continue;
        const std::uint64_t key = static_cast<std::uint64_t>(s) << 32 | static_cast<std::uint32_t>(t);
        const auto [at, inserted] = index.try_emplace(key, next.size());
        if (inserted) {
          if (++entries_ > entry_limit) return false;
          next.push_back(
              {static_cast<std::int32_t>(s), static_cast<std::int32_t>(t), v, static_cast<std::int32_t>(it->second)});
        } else if (v < next[at->second].cost) {
          next[at->second].cost = v;
          next[at->second].from = static_cast<std::int32_t>(it->second);
        }
      }
    }
  }
  return true;
}

void TwoNodeProgram::search(double incumbent, long entry_limit, TwoNodeChainResult& out) {
  const double ceiling = std::isfinite(incumbent) ? incumbent * (1.0 + 1e-9) : kInf;
  for (double margin : {0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 3.0, kInf}) {
    const double cutoff = std::isfinite(margin) ? std::min(ceiling, unconstrained_ * (1.0 + margin)) : ceiling;
    const bool ran = run(cutoff, entry_limit);
    out.entries = entries_;
    if (!ran) return;
    const auto& last = layers_[L_ - 1];
    std::size_t at = last.size();
    for (std::size_t i = 0; i < last.size(); ++i)
      if (at == last.size() || last[i].cost < last[at].cost) at = i;
    if (at < last.size()) {
      out.completed = out.feasible = true;
      out.objective = last[at].cost;
      std::vector<std::uint32_t> first(L_);
      for (std::size_t l = L_; l-- > 0;) {
        first[l] = sets_[static_cast<std::size_t>(layers_[l][at].set)];
        at = static_cast<std::size_t>(layers_[l][at].from);
      }
      out.cluster_on = layout_from_sets(p_, f_.dense_node, first, lo_, hi_);
      return;
    }
    if (cutoff >= ceiling) {
      out.completed = true;  // no chain at or below the incumbent
      return;
    }
  }
}

}  // namespace

TwoNodeChainResult stage2_two_node_chain(const Stage2Problem& p, int lo, int hi, double incumbent, long entry_limit) {
  TwoNodeChainResult out;
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = p.sizes.size();
  if (G < 2 || G > 16 || L < 2) return out;
  const Stage2Fabric f = stage2_fabric(p);
  if (f.node_size.size() != 2 || !std::isfinite(f.slow)) return out;
  out.applicable = true;
  TwoNodeProgram program(p, f, lo, hi);
  out.unconstrained = program.unconstrained();
  program.search(incumbent, entry_limit, out);
  return out;
}

}  // namespace moesim::sim
