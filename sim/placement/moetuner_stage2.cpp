// The stage-2 driver (docs/placement.md): a chained bottleneck-assignment start, the memory balance,
// block-coordinate descent; then, by the number of ranks, the two-node chain program, an iterated
// local search, the exhaustive layer pairs and the chain program; the tie-break last. Bounds are
// computed for the whole stage problem, not the parts.
#include "sim/placement/moetuner_stage2.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "sim/placement/splitmix.hpp"
#include "sim/placement/stage2_parts.hpp"

namespace moesim::sim {

namespace {

using solver::close_to;
using Layout = std::vector<std::vector<int>>;

bool lowers(double value, double current) { return value < current - 1e-12 * std::max(1e-30, current); }

class Stage2Solver {
 public:
  Stage2Solver(const Stage2Problem& p, const SolverLimits& limits);
  Stage2Result solve();

 private:
  Layout chained_start();
  double descend(Layout& layout);
  bool descend_window(Layout& layout, std::size_t first, std::size_t last);
  std::vector<int> better_layer(const Layout& layout, std::size_t l, int sweep, std::size_t k);
  double two_node_phase(Layout& on, double& current);
  void iterated_local_search(Layout& on, double& current);
  void windowed_local_search(Layout& on, double& current);
  void paired_kicks(Layout& on, double& current);
  bool chain_phase(Layout& on);
  void tie_break(Layout& on);
  void relabel_segments(Layout& on);
  void hot_chain_plan(Layout& on, const HotChainResult& plan) const;
  double repair(Layout& trial);
  // A balanced layout at the hot-chain program's bound: proven optimal.
  bool meets_hot_bound(const Layout& on, double value) const {
    return balanced(on) && hot_.applicable && !lowers(hot_.bound, value);
  }
  // 1 to 3 random swaps of two ranks' clusters of equal size, each in the layer `pick_layer` draws
  // (after the swap count); the draws in the same order as the searches have always made them.
  template <typename Pick>
  void kick(Layout& trial, SplitMix& rng, Pick pick_layer) const {
    const std::size_t kicks = 1 + rng.below(3);
    for (std::size_t k = 0; k < kicks; ++k) {
      const std::size_t l = pick_layer();
      const std::size_t g = rng.below(G_);
      std::size_t h = rng.below(G_ - 1);
      if (h >= g) ++h;
      auto& layer = trial[l];
      if (p_.sizes[l][static_cast<std::size_t>(layer[g])] == p_.sizes[l][static_cast<std::size_t>(layer[h])])
        std::swap(layer[g], layer[h]);
    }
  }
  void finish(Layout on, double node_bound, bool chain_proven);
  bool balanced(const Layout& on) const {
    return stage2::memory_violation(stage2::memory_totals(p_, on), out_.memory_target_lo, out_.memory_target_hi) == 0;
  }
  bool out_of_time() const { return solver::out_of_time(limits_, deadline_); }

  const Stage2Problem& p_;
  const SolverLimits& limits_;
  solver::Clock::time_point t0_, deadline_;
  std::size_t G_, L_;
  // Up to 256 ranks the layer sub-problems are solved exactly by threshold matchings (no work limit;
  // at 64 ranks a few tens of ms a layer, where GLPK's assignment ILP stopped at its node limit and
  // the descent ran out of time); beyond, by GLPK under the node limit.
  bool combinatorial_;
  Stage2Result out_;
  bool limit_hit_ = false;
  HotChainResult hot_;
};

Stage2Solver::Stage2Solver(const Stage2Problem& p, const SolverLimits& limits)
    : p_(p),
      limits_(limits),
      t0_(solver::Clock::now()),
      deadline_(solver::deadline(t0_, limits)),
      G_(static_cast<std::size_t>(p.ranks)),
      L_(p.sizes.size()),
      combinatorial_(G_ <= 256) {
  if (G_ < 1 || p.cost.size() != G_ * G_ || p.node.size() != G_ || p.traffic.size() + 1 != std::max<std::size_t>(L_, 1))
    throw std::logic_error("moetuner_stage2: inconsistent problem sizes");
}

// Each layer's bottleneck assignment given the previous one, layer 0 as it comes.
Layout Stage2Solver::chained_start() {
  Layout on(L_);
  std::vector<int> identity(G_);
  std::iota(identity.begin(), identity.end(), 0);
  if (L_ > 0) on[0] = identity;
  for (std::size_t l = 1; l < L_; ++l) {
    const std::vector<double> w = stage2::left_weights(p_, l, on[l - 1]);
    if (combinatorial_) {
      on[l] = stage2_layer_exact(G_, &w, nullptr, std::vector<char>(G_ * G_, 1));
      continue;
    }
    SolverLimits part = limits_;
    const stage2::LayerAssignment a =
        stage2::layer_assignment(p_, l, &w, nullptr, identity, nullptr, nullptr, part,
                                 solver::part_time(limits_, deadline_, static_cast<int>(2 * L_)));
    ++out_.report.glpk_solves;
    limit_hit_ = limit_hit_ || a.limit_hit;
    on[l] = a.cluster_on;
  }
  return on;
}

// Layer l re-solved given both neighbours, every rank's experts kept within the targets (or no
// farther out than now): the new layout, or empty when it would not change.
std::vector<int> Stage2Solver::better_layer(const Layout& layout, std::size_t l, int sweep, std::size_t k) {
  const std::vector<int> total = stage2::memory_totals(p_, layout);
  const int tmin = *std::min_element(total.begin(), total.end());
  const int tmax = *std::max_element(total.begin(), total.end());
  std::vector<int> lo(G_), hi(G_);
  for (std::size_t g = 0; g < G_; ++g) {
    const int other = total[g] - p_.sizes[l][static_cast<std::size_t>(layout[l][g])];
    lo[g] = std::min(out_.memory_target_lo, tmin) - other;
    hi[g] = std::max(out_.memory_target_hi, tmax) - other;
  }
  std::vector<double> wl, wr;
  if (l > 0) wl = stage2::left_weights(p_, l, layout[l - 1]);
  if (l + 1 < L_) wr = stage2::right_weights(p_, l, layout[l + 1]);
  const int parts_left = static_cast<int>((limits_.sweeps - sweep) * static_cast<int>(L_) - static_cast<int>(k));
  if (combinatorial_) {
    std::vector<char> allowed(G_ * G_, 0);
    for (std::size_t c = 0; c < G_; ++c)
      for (std::size_t g = 0; g < G_; ++g)
        allowed[c * G_ + g] = p_.sizes[l][c] >= lo[g] && p_.sizes[l][c] <= hi[g] ? 1 : 0;
    std::vector<int> next = stage2_layer_exact(G_, l > 0 ? &wl : nullptr, l + 1 < L_ ? &wr : nullptr, allowed);
    if (next == layout[l]) return {};
    return next;
  }
  const stage2::LayerAssignment a =
      stage2::layer_assignment(p_, l, l > 0 ? &wl : nullptr, l + 1 < L_ ? &wr : nullptr, layout[l], &lo, &hi, limits_,
                               solver::part_time(limits_, deadline_, parts_left));
  ++out_.report.glpk_solves;
  limit_hit_ = limit_hit_ || a.limit_hit;
  if (!a.improved) return {};
  return a.cluster_on;
}

// Block-coordinate descent: each layer re-solved exactly (up to the work limit) given both
// neighbours, forward and backward sweeps, kept when the objective drops. Returns the objective.
double Stage2Solver::descend(Layout& layout) {
  double current = stage2_objective(p_, layout);
  for (int sweep = 0; sweep < limits_.sweeps && L_ > 1; ++sweep) {
    bool any = false;
    for (std::size_t k = 0; k < L_; ++k) {
      if (out_of_time()) {
        limit_hit_ = true;
        break;
      }
      const std::size_t l = sweep % 2 == 0 ? k : L_ - 1 - k;
      std::vector<int> next_layout = better_layer(layout, l, sweep, k);
      if (next_layout.empty()) continue;
      std::vector<int> saved = layout[l];
      layout[l] = next_layout;
      const double next = stage2_objective(p_, layout);
      if (lowers(next, current)) {
        current = next;
        any = true;
      } else {
        layout[l] = saved;
      }
    }
    if (!any) break;
  }
  return current;
}

// Two nodes: the chain program over the node sets bounds the whole stage with the memory rows kept
// (summed per node), and its chain, the ranks inside each node balanced, starts a descent. Returns
// the bound (0 when the program did not apply).
double Stage2Solver::two_node_phase(Layout& on, double& current) {
  const int lo = out_.memory_target_lo, hi = out_.memory_target_hi;
  double node_bound = 0.0;
  if (!combinatorial_ || L_ <= 1 || out_of_time()) return node_bound;
  const bool balanced_now = balanced(on);
  const double incumbent = balanced_now ? current : std::numeric_limits<double>::infinity();
  const TwoNodeChainResult nodes = stage2_two_node_chain(p_, lo, hi, incumbent, limits_.node_chain_states);
  out_.node_chain_states = nodes.entries;
  if (nodes.applicable) {
    limit_hit_ = limit_hit_ || !nodes.completed;
    node_bound = nodes.unconstrained;
    // Completed without a chain: none is cheaper than the (balanced) incumbent.
    if (nodes.completed && nodes.feasible) node_bound = nodes.objective;
    if (nodes.completed && !nodes.feasible && std::isfinite(incumbent)) node_bound = incumbent;
  }
  if (nodes.feasible) {
    Layout trial = nodes.cluster_on;
    stage2::balance_memory(p_, trial, lo, hi);
    if (balanced(trial)) {
      const double value = descend(trial);
      if (!balanced_now || lowers(value, current)) {
        on = std::move(trial);
        current = value;
      }
    }
  }
  return node_bound;
}

// Iterated local search (exact layer solves only): swap the clusters of two ranks holding equally
// many experts in one layer (the balance is kept), descend again, keep the result when it is
// better. A fixed number of rounds from a fixed seed: the same result on every machine.
void Stage2Solver::iterated_local_search(Layout& on, double& current) {
  SplitMix rng(0x243f6a8885a308d3ULL);
  for (int round = 0; round < limits_.perturbations && !out_of_time(); ++round) {
    Layout trial = on;
    kick(trial, rng, [&] { return rng.below(L_); });
    if (trial == on) continue;
    const double value = descend(trial);
    if (lowers(value, current)) {
      on = std::move(trial);
      current = value;
    }
  }
}

// Layers first..last re-solved exactly given their neighbours, forward then backward, until a sweep
// changes nothing (at most limits_.sweeps): only the pairs touching them can change. True when the
// objective of those pairs dropped.
bool Stage2Solver::descend_window(Layout& layout, std::size_t first, std::size_t last) {
  auto local = [&] {
    double s = 0.0;
    for (std::size_t l = first > 0 ? first - 1 : 0; l < last && l + 1 < L_; ++l)
      s += stage2_pair_objective(p_, l, layout[l], layout[l + 1]);
    return s;
  };
  const double before = local();
  double current = before;
  for (int sweep = 0; sweep < limits_.sweeps; ++sweep) {
    bool any = false;
    for (std::size_t k = first; k <= last; ++k) {
      const std::size_t l = sweep % 2 == 0 ? k : first + last - k;
      std::vector<int> next_layout = better_layer(layout, l, 0, 0);
      if (next_layout.empty()) continue;
      std::vector<int> saved = std::exchange(layout[l], std::move(next_layout));
      const double next = local();
      if (lowers(next, current)) {
        current = next;
        any = true;
      } else {
        layout[l] = std::move(saved);
      }
    }
    if (!any) break;
  }
  return lowers(current, before);
}

// Many ranks: a whole-chain descent per round is too slow, so each round kicks one or two adjacent
// layers (swaps of ranks holding equally many experts) and re-solves only the layers around them.
// Kept when the whole objective drops. Rounds and seed fixed as in iterated_local_search; it stops
// at three quarters of the time limit to leave the tie-break and the bounds their time.
void Stage2Solver::windowed_local_search(Layout& on, double& current) {
  SplitMix rng(0x243f6a8885a308d3ULL);
  const double share = limits_.time_limit > 0 ? 0.75 * limits_.time_limit : 0.0;
  for (int round = 0; round < limits_.perturbations; ++round) {
    if (share > 0 && solver::seconds_since(t0_) >= share) {
      limit_hit_ = true;
      break;
    }
    Layout trial = on;
    const std::size_t l0 = rng.below(L_);
    kick(trial, rng, [&] { return std::min(L_ - 1, l0 + rng.below(2)); });
    if (trial == on) continue;
    descend_window(trial, l0 > 1 ? l0 - 2 : 0, std::min(L_ - 1, l0 + 3));
    const double value = stage2_objective(p_, trial);
    if (lowers(value, current) && balanced(trial) == balanced(on)) {
      on = std::move(trial);
      current = value;
    }
  }
}

// The kicks above keep every rank's experts (equal sizes), so they never move experts between ranks.
// Here two ranks swap clusters of different sizes in one layer and swap back, in another layer
// chosen at random, two clusters differing by as much the other way: their totals stay as they
// were, experts move between the layers. Both windows re-solved; kept when the objective drops.
// Rounds, seed and the time share as in windowed_local_search.
void Stage2Solver::paired_kicks(Layout& on, double& current) {
  SplitMix rng(0x13198a2e03707344ULL);
  const double share = limits_.time_limit > 0 ? 0.75 * limits_.time_limit : 0.0;
  auto size_on = [&](const Layout& x, std::size_t l, std::size_t g) {
    return p_.sizes[l][static_cast<std::size_t>(x[l][g])];
  };
  for (int round = 0; round < limits_.perturbations; ++round) {
    if (share > 0 && solver::seconds_since(t0_) >= share) {
      limit_hit_ = true;
      break;
    }
    const std::size_t l0 = rng.below(L_);
    const std::size_t g = rng.below(G_);
    std::size_t h = rng.below(G_ - 1);
    if (h >= g) ++h;
    const int d = size_on(on, l0, g) - size_on(on, l0, h);
    if (d == 0) continue;
    std::vector<std::size_t> back;
    for (std::size_t l = 0; l < L_; ++l)
      if (l != l0 && size_on(on, l, g) - size_on(on, l, h) == -d) back.push_back(l);
    if (back.empty()) continue;
    const std::size_t l1 = back[rng.below(back.size())];
    Layout trial = on;
    std::swap(trial[l0][g], trial[l0][h]);
    std::swap(trial[l1][g], trial[l1][h]);
    descend_window(trial, l0 > 1 ? l0 - 2 : 0, std::min(L_ - 1, l0 + 3));
    descend_window(trial, l1 > 1 ? l1 - 2 : 0, std::min(L_ - 1, l1 + 3));
    const double value = stage2_objective(p_, trial);
    if (lowers(value, current) && balanced(trial) == balanced(on)) {
      on = std::move(trial);
      current = value;
    }
  }
}

// The chained start keeps the hottest clusters on the same ranks and node in every layer, so those
// ranks hold far too few experts, and no layer-by-layer move can fix that without raising every
// pair. Relabelling the ranks of all layers c+1.. at once by a permutation that keeps every link's
// cost (two ranks of one node, or two whole nodes, rank by rank) changes only pair c's objective
// and moves whole suffixes of experts between ranks. Greedy: among the 64 moves that reduce the
// squared deviation of the ranks' totals from the mean most, the cheapest in pair c; until none
// reduces it or the layout is balanced.
void Stage2Solver::relabel_segments(Layout& on) {
  const Stage2Fabric f = stage2_fabric(p_);
  const auto& members = f.members;
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> moves;  // transpositions of ranks
  for (const auto& m : members)
    for (std::size_t a = 0; a < m.size(); ++a)
      for (std::size_t b = a + 1; b < m.size(); ++b) moves.push_back({{m[a], m[b]}});
  for (std::size_t n1 = 0; n1 < members.size(); ++n1)
    for (std::size_t n2 = n1 + 1; n2 < members.size(); ++n2) {
      if (members[n1].size() != members[n2].size()) continue;
      std::vector<std::pair<std::size_t, std::size_t>> swap;
      for (std::size_t k = 0; k < members[n1].size(); ++k) swap.push_back({members[n1][k], members[n2][k]});
      moves.push_back(swap);
    }
  const double mean = 0.5 * (out_.memory_target_lo + out_.memory_target_hi);
  for (int round = 0; round < 10000 && !balanced(on) && !out_of_time(); ++round) {
    std::vector<int> total = stage2::memory_totals(p_, on);
    // suffix[c][g]: experts on g in layers c+1..
    std::vector<std::vector<int>> suffix(L_, std::vector<int>(G_, 0));
    for (std::size_t c = L_ - 1; c-- > 0;)
      for (std::size_t g = 0; g < G_; ++g)
        suffix[c][g] = suffix[c + 1][g] + p_.sizes[c + 1][static_cast<std::size_t>(on[c + 1][g])];
    struct Cand {
      double dev;
      std::size_t c, m;
    };
    std::vector<Cand> cands;
    for (std::size_t c = 0; c + 1 < L_; ++c)
      for (std::size_t m = 0; m < moves.size(); ++m) {
        double d = 0.0;
        for (const auto& [g, h] : moves[m]) {
          const double tg = total[g] - suffix[c][g] + suffix[c][h], th = total[h] - suffix[c][h] + suffix[c][g];
          d += (tg - mean) * (tg - mean) + (th - mean) * (th - mean) - (total[g] - mean) * (total[g] - mean) -
               (total[h] - mean) * (total[h] - mean);
        }
        if (d < -1e-9) cands.push_back({d, c, m});
      }
    if (cands.empty()) break;
    const std::size_t keep = std::min<std::size_t>(64, cands.size());
    std::partial_sort(cands.begin(), cands.begin() + static_cast<long>(keep), cands.end(),
                      [](const Cand& a, const Cand& b) { return a.dev < b.dev || (a.dev == b.dev && a.c < b.c); });
    double best = std::numeric_limits<double>::infinity();
    std::size_t pick = 0;
    for (std::size_t k = 0; k < keep; ++k) {
      std::vector<int> next = on[cands[k].c + 1];
      for (const auto& [g, h] : moves[cands[k].m]) std::swap(next[g], next[h]);
      const double v = stage2_pair_objective(p_, cands[k].c, on[cands[k].c], next);
      if (lowers(v, best)) best = v, pick = k;
    }
    for (std::size_t l = cands[pick].c + 1; l < L_; ++l)
      for (const auto& [g, h] : moves[cands[pick].m]) std::swap(on[l][g], on[l][h]);
  }
}

// The plan of the hot-chain program (stage2_hot_chain_bound) on the chained start, whose hottest
// clusters share one node throughout. At each cut, every later layer's ranks of the hot node swap
// with those of a node that has not held the hot clusters yet, rank by rank, which changes only the
// cut pair's cost. Then, in every layer where the plan's hot node holds more experts than now, its
// coolest clusters (least traffic with the hot clusters around) swap with the largest clusters of
// other nodes until it holds as many.
void Stage2Solver::hot_chain_plan(Layout& on, const HotChainResult& plan) const {
  const Stage2Fabric f = stage2_fabric(p_);
  const auto& members = f.members;
  std::vector<char> used(members.size(), 0);
  auto hot_node = [&](std::size_t l) {
    const auto g = static_cast<std::size_t>(
        std::find(on[l].begin(), on[l].end(), static_cast<int>(plan.hot[l])) - on[l].begin());
    return static_cast<std::size_t>(f.dense_node[g]);
  };
  if (L_ > 0) used[hot_node(0)] = 1;
  for (std::size_t c : plan.cuts) {
    const std::size_t from = hot_node(c + 1);
    std::size_t to = 0;
    while (to < members.size() && (used[to] || members[to].size() != members[from].size())) ++to;
    if (to == members.size()) std::fill(used.begin(), used.end(), 0), to = (from + 1) % members.size();
    used[to] = 1;
    for (std::size_t l = c + 1; l < L_; ++l)
      for (std::size_t k = 0; k < members[from].size(); ++k) std::swap(on[l][members[from][k]], on[l][members[to][k]]);
  }
  // heat(l, c): cluster c's traffic with the hot clusters of the layers around l.
  auto heat = [&](std::size_t l, std::size_t c) {
    double h = 0.0;
    if (l > 0) h += p_.traffic[l - 1][plan.hot[l - 1] * G_ + c];
    if (l + 1 < L_) h += p_.traffic[l][c * G_ + plan.hot[l + 1]];
    return h;
  };
  auto size_on = [&](std::size_t l, std::size_t g) { return p_.sizes[l][static_cast<std::size_t>(on[l][g])]; };
  std::vector<std::size_t> hot_at(L_);
  std::vector<long> node_total(members.size(), 0);
  for (std::size_t l = 0; l < L_; ++l) {
    hot_at[l] = hot_node(l);
    for (std::size_t g = 0; g < G_; ++g) node_total[static_cast<std::size_t>(f.dense_node[g])] += size_on(l, g);
  }
  auto held = [&](std::size_t l, std::size_t n) {
    int e = 0;
    for (std::size_t g : members[n]) e += size_on(l, g);
    return e;
  };
  auto swap_ranks = [&](std::size_t l, std::size_t g, std::size_t h) {
    const int d = size_on(l, h) - size_on(l, g);
    node_total[static_cast<std::size_t>(f.dense_node[g])] += d;
    node_total[static_cast<std::size_t>(f.dense_node[h])] -= d;
    std::swap(on[l][g], on[l][h]);
  };
  auto pinned = [&](std::size_t l, std::size_t g) {
    const auto& t = plan.tied[l];
    return std::binary_search(t.begin(), t.end(), on[l][g]);
  };
  // The tied clusters onto the hot node (each for its coolest untied cluster), then the hot node up
  // to the plan's experts: its coolest untied cluster out, the largest untied one of the node with
  // the most experts over all layers in (the coolest among equals).
  for (std::size_t l = 0; l < L_; ++l) {
    const std::size_t x = hot_at[l];
    auto coolest_untied = [&] {
      std::size_t out = G_;
      for (std::size_t g : members[x])
        if (!pinned(l, g) &&
            (out == G_ || heat(l, static_cast<std::size_t>(on[l][g])) < heat(l, static_cast<std::size_t>(on[l][out]))))
          out = g;
      return out;
    };
    for (std::size_t h = 0; h < G_; ++h)
      if (static_cast<std::size_t>(f.dense_node[h]) != x && pinned(l, h)) {
        const std::size_t out = coolest_untied();
        if (out == G_) break;
        swap_ranks(l, out, h);
      }
    while (held(l, x) < plan.hold[l]) {
      const std::size_t out = coolest_untied();
      if (out == G_) break;
      std::size_t in = G_;
      auto better = [&](std::size_t h) {
        if (in == G_) return true;
        const long nh = node_total[static_cast<std::size_t>(f.dense_node[h])];
        const long ni = node_total[static_cast<std::size_t>(f.dense_node[in])];
        if (size_on(l, h) != size_on(l, in)) return size_on(l, h) > size_on(l, in);
        if (nh != ni) return nh > ni;
        return heat(l, static_cast<std::size_t>(on[l][h])) < heat(l, static_cast<std::size_t>(on[l][in]));
      };
      for (std::size_t h = 0; h < G_; ++h)
        if (static_cast<std::size_t>(f.dense_node[h]) != x && !pinned(l, h) && size_on(l, h) > size_on(l, out) &&
            better(h))
          in = h;
      if (in == G_) break;
      swap_ranks(l, out, in);
    }
  }
  // The nodes toward their share (node ranks x [lo, hi]): a cluster of a node short of it swaps with
  // a larger one of a node over it, in a layer where neither is hot and the hot node keeps the plan's
  // experts; the coolest such swap that overshoots neither node, until none is left.
  const int lo = out_.memory_target_lo, hi = out_.memory_target_hi;
  for (int step = 0; step < 100000; ++step) {
    double best = std::numeric_limits<double>::infinity();
    std::size_t bl = 0, bg = G_, bh = G_;
    for (std::size_t l = 0; l < L_; ++l)
      for (std::size_t g = 0; g < G_; ++g) {
        const auto ng = static_cast<std::size_t>(f.dense_node[g]);
        const long need = static_cast<long>(members[ng].size()) * lo - node_total[ng];
        if (need <= 0 || pinned(l, g)) continue;
        for (std::size_t h = 0; h < G_; ++h) {
          const auto nh = static_cast<std::size_t>(f.dense_node[h]);
          const long spare = node_total[nh] - static_cast<long>(members[nh].size()) * hi;
          const int d = size_on(l, h) - size_on(l, g);
          if (nh == ng || spare <= 0 || d <= 0 || d > need || d > spare) continue;
          if (pinned(l, h)) continue;
          if (nh == hot_at[l] && held(l, nh) - d < plan.hold[l]) continue;
          const double c = heat(l, static_cast<std::size_t>(on[l][g])) + heat(l, static_cast<std::size_t>(on[l][h]));
          if (c < best) best = c, bl = l, bg = g, bh = h;
        }
      }
    if (bg == G_) break;
    swap_ranks(bl, bg, bh);
  }
}

// The repair every start gets: as close to the memory balance as it goes without raising any
// bottleneck, then the greedy balancing swaps (which may raise them), then the descent. Returns the
// objective.
double Stage2Solver::repair(Layout& trial) {
  stage2_balance_within_bottlenecks(p_, trial, out_.memory_target_lo, out_.memory_target_hi, 4 * limits_.sweeps);
  stage2::balance_memory(p_, trial, out_.memory_target_lo, out_.memory_target_hi);
  return descend(trial);
}

// Few ranks: the chain program settles the whole stage, memory rows included. True when it proved
// the layout optimal.
bool Stage2Solver::chain_phase(Layout& on) {
  if (G_ > 5 || L_ == 0 || out_of_time()) return false;
  const bool was_balanced = balanced(on);
  const double incumbent = was_balanced ? stage2_objective(p_, on) : std::numeric_limits<double>::infinity();
  const ChainDpResult dp =
      stage2_chain_dp(p_, out_.memory_target_lo, out_.memory_target_hi, incumbent, limits_.chain_entries);
  out_.chain_entries = dp.entries;
  limit_hit_ = limit_hit_ || !dp.completed;
  if (!dp.completed) return false;
  if (dp.feasible && (!was_balanced || stage2_objective(p_, dp.cluster_on) < incumbent)) on = dp.cluster_on;
  // Completed and balanced (found, or nothing below a balanced incumbent): the optimum.
  return dp.feasible || was_balanced;
}

// Many layouts tie on the bottlenecks (with many nodes, any that keeps each pair's heaviest
// crossing in place); among them, prefer less total transfer. Lexicographic: no pair objective
// rises, so the objective, bounds and proofs hold as they are.
void Stage2Solver::tie_break(Layout& on) {
  out_.volume_before_tie_break = stage2_volume(p_, on);
  if (L_ > 1)
    out_.tie_break_changes =
        stage2_tie_break(p_, on, out_.memory_target_lo, out_.memory_target_hi, limits_.tie_break_sweeps);
  out_.volume = stage2_volume(p_, on);
}

// Objective and bounds per pair, then for the whole stage: the chain windows, the two-node program
// and the chain program can each raise the bound above the sum of the pairs'.
void Stage2Solver::finish(Layout on, double node_bound, bool chain_proven) {
  const int lo = out_.memory_target_lo, hi = out_.memory_target_hi;
  StageReport& report = out_.report;
  const std::vector<int> total = stage2::memory_totals(p_, on);
  out_.memory_min = total.empty() ? 0 : *std::min_element(total.begin(), total.end());
  out_.memory_max = total.empty() ? 0 : *std::max_element(total.begin(), total.end());
  for (std::size_t l = 0; l + 1 < L_; ++l) {
    const double obj = stage2_pair_objective(p_, l, on[l], on[l + 1]);
    const double bound = std::min(obj, stage2_pair_bound(p_, l));
    out_.pair_objective.push_back(obj);
    out_.pair_bound.push_back(bound);
    report.objective += obj;
    report.bound += bound;
    report.parts_optimal += close_to(obj, bound) ? 1 : 0;
  }
  report.parts = static_cast<int>(L_ > 0 ? L_ - 1 : 0);
  // The windows see the coupling through shared layers that the per-pair bounds miss.
  if (G_ > 1 && L_ > 2)
    report.bound = std::min(report.objective, std::max(report.bound, stage2_chain_window_bound(p_)));
  if (node_bound > report.bound) {
    report.bound = std::min(report.objective, node_bound);
    out_.node_chain_bound = true;
    out_.node_chain_proven = out_.memory_min >= lo && out_.memory_max <= hi && close_to(report.objective, node_bound);
    if (out_.node_chain_proven) report.parts_optimal = report.parts;
  }
  // Several nodes: the hot-chain program keeps the memory rows (summed per node).
  if (hot_.applicable && hot_.bound > report.bound && !out_.node_chain_proven) {
    report.bound = std::min(report.objective, hot_.bound);
    out_.hot_chain_bound = true;
    out_.node_chain_bound = out_.node_chain_proven = false;
    out_.hot_chain_proven = out_.memory_min >= lo && out_.memory_max <= hi && close_to(report.objective, hot_.bound);
    if (out_.hot_chain_proven) report.parts_optimal = report.parts;
  }
  out_.hot_chain = hot_;
  if (chain_proven) {
    // The whole chain is optimal: its objective is the stage's bound, and every pair is part of it.
    report.bound = report.objective;
    report.parts_optimal = report.parts;
  }
  out_.chain_proven = chain_proven;
  report.gap = solver::relative_gap(report.objective, report.bound);
  const bool balanced_now = out_.memory_min >= lo && out_.memory_max <= hi;
  report.status = balanced_now && close_to(report.objective, report.bound) ? "optimal"
                  : limit_hit_                                             ? "limit_reached"
                                                                           : "feasible";
  report.seconds = solver::seconds_since(t0_);
  out_.cluster_on = std::move(on);
}

Stage2Result Stage2Solver::solve() {
  Layout on = chained_start();
  long experts = 0;
  for (const auto& s : p_.sizes) experts += std::accumulate(s.begin(), s.end(), 0L);
  out_.memory_target_lo = static_cast<int>(experts / static_cast<long>(G_));
  out_.memory_target_hi = static_cast<int>((experts + static_cast<long>(G_) - 1) / static_cast<long>(G_));
  const int lo = out_.memory_target_lo, hi = out_.memory_target_hi;
  Layout kept;
  double current = std::numeric_limits<double>::infinity();
  // A repaired layout replaces the incumbent when there is none, or when it is balanced and the
  // incumbent is not or costs more.
  auto offer = [&](Layout& trial, double value) {
    if (kept.empty() || (balanced(trial) && (!balanced(kept) || lowers(value, current)))) {
      kept = std::move(trial);
      current = value;
    }
  };
  auto proven = [&] { return !kept.empty() && meets_hot_bound(kept, current); };
  // Several nodes beyond 16 ranks, first: the plan of the hot-chain program (hot_chain_plan) from the
  // chained start (whose hottest clusters share one node throughout), then the repair; planned again
  // with room kept in each run for the rank balance while the result is above the bound. Balanced
  // results only.
  hot_ = stage2_hot_chain_bound(p_, lo);
  if (G_ > 16 && L_ > 1 && hot_.applicable) {
    for (int reserve : {0, 64, 256}) {
      const HotChainResult plan = reserve == 0 ? hot_ : stage2_hot_chain_bound(p_, lo, reserve);
      if (!plan.applicable) continue;
      Layout planned = on;
      hot_chain_plan(planned, plan);
      // The ranks balanced inside each node first (the node totals kept), or not.
      for (bool nodes_first : {true, false}) {
        if (out_of_time() || proven()) break;
        Layout trial = planned;
        if (nodes_first) stage2::balance_within_nodes(p_, trial, lo, hi);
        const double value = repair(trial);
        if (balanced(trial)) offer(trial, value);
      }
    }
  }
  // Unless that met the bound: the chained start repaired. Up to 16 ranks the greedy swaps from the
  // start itself are descended too and the better kept (each descent costs seconds at 64 ranks).
  if (!proven()) {
    Layout trial = on;
    const double value = repair(trial);
    offer(trial, value);
  }
  // Many ranks: the chained start relabelled by segments toward the balance (see relabel_segments),
  // then the same repair.
  if (G_ > 16 && L_ > 1 && !proven()) {
    Layout trial = on;
    relabel_segments(trial);
    const double value = repair(trial);
    offer(trial, value);
  }
  if (G_ <= 16) {
    stage2::balance_memory(p_, on, out_.memory_target_lo, out_.memory_target_hi);
    const double value = descend(on);
    if ((balanced(on) && !balanced(kept)) || (balanced(on) == balanced(kept) && !lowers(current, value))) {
      current = value;
      kept = std::move(on);
    }
  }
  on = std::move(kept);
  const double node_bound = two_node_phase(on, current);
  const bool proven_by_nodes = balanced(on) && node_bound > 0.0 && close_to(current, node_bound);
  if (G_ <= 16 && L_ > 1 && G_ > 1 && !proven_by_nodes) iterated_local_search(on, current);
  if (G_ > 16 && L_ > 1 && !meets_hot_bound(on, current)) {
    windowed_local_search(on, current);
    paired_kicks(on, current);
  }
  if (G_ <= 5 && L_ > 1)
    stage2::exhaustive_layer_pairs(p_, on, out_.memory_target_lo, out_.memory_target_hi, limits_, deadline_);
  const bool chain_proven = chain_phase(on);
  tie_break(on);
  finish(std::move(on), node_bound, chain_proven);
  return std::move(out_);
}

}  // namespace

Stage2Result moetuner_stage2(const Stage2Problem& p, const SolverLimits& limits) {
  return Stage2Solver(p, limits).solve();
}

}  // namespace moesim::sim
