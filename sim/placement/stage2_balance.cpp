// Stage-2 moves under the memory balance: swaps of two ranks' clusters that bring every rank's
// expert total into [lo, hi] at the least objective cost, and for a few ranks every layout of two
// adjacent layers at once.
#include <algorithm>
#include <cmath>
#include <limits>

#include "sim/placement/stage2_parts.hpp"

namespace moesim::sim::stage2 {

namespace {

// The pairs touching layer l: (l - 1, l) and (l, l + 1).
double pairs_around(const Stage2Problem& p, const std::vector<std::vector<int>>& on, std::size_t l) {
  double s = 0.0;
  if (l > 0) s += stage2_pair_objective(p, l - 1, on[l - 1], on[l]);
  if (l + 1 < on.size()) s += stage2_pair_objective(p, l, on[l], on[l + 1]);
  return s;
}

// The cheapest swap (layer, rank g, rank h) that lowers the violation v0, among swaps between the
// fullest and the emptiest rank first, then between either of them and any other rank. False when
// none lowers it.
bool cheapest_balancing_swap(const Stage2Problem& p, std::vector<std::vector<int>>& on, const std::vector<int>& total,
                             int lo, int hi, std::size_t& bl, std::size_t& bg, std::size_t& bh) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = on.size();
  const int v0 = memory_violation(total, lo, hi);
  double best_cost = std::numeric_limits<double>::infinity();
  int best_v = v0;
  for (int widen = 0; widen < 2 && !std::isfinite(best_cost); ++widen) {
    const auto gmax = static_cast<std::size_t>(std::max_element(total.begin(), total.end()) - total.begin());
    const auto gmin = static_cast<std::size_t>(std::min_element(total.begin(), total.end()) - total.begin());
    for (std::size_t g = 0; g < G; ++g)
      for (std::size_t h = 0; h < G; ++h) {
        if (g == h) continue;
        if (widen == 0 && !(g == gmax && h == gmin)) continue;
        if (widen == 1 && g != gmax && h != gmin) continue;
        for (std::size_t l = 0; l < L; ++l) {
          const int sg = p.sizes[l][static_cast<std::size_t>(on[l][g])];
          const int sh = p.sizes[l][static_cast<std::size_t>(on[l][h])];
          if (sg <= sh) continue;
          std::vector<int> t2 = total;
          t2[g] += sh - sg;
          t2[h] += sg - sh;
          const int v = memory_violation(t2, lo, hi);
          if (v >= v0) continue;
          const double before = pairs_around(p, on, l);
          std::swap(on[l][g], on[l][h]);
          const double cost = pairs_around(p, on, l) - before;
          std::swap(on[l][g], on[l][h]);
          if (cost < best_cost - 1e-15 || (cost <= best_cost + 1e-15 && v < best_v))
            best_cost = cost, best_v = v, bl = l, bg = g, bh = h;
        }
      }
  }
  return std::isfinite(best_cost);
}

// The pairs touching layers l and l + 1.
double pairs_around_two(const Stage2Problem& p, const std::vector<std::vector<int>>& on, std::size_t l) {
  double s = stage2_pair_objective(p, l, on[l], on[l + 1]);
  if (l > 0) s += stage2_pair_objective(p, l - 1, on[l - 1], on[l]);
  if (l + 2 < on.size()) s += stage2_pair_objective(p, l + 1, on[l + 1], on[l + 2]);
  return s;
}

// Layers l and l + 1 set to the best pair of layouts (given the rest) that does not widen the
// violation. True when they changed.
bool best_layer_pair(const Stage2Problem& p, std::vector<std::vector<int>>& on, std::size_t l,
                     const std::vector<std::vector<int>>& perms, int lo, int hi) {
  const auto G = static_cast<std::size_t>(p.ranks);
  std::vector<int> total = memory_totals(p, on);
  std::vector<int> other(G);
  for (std::size_t g = 0; g < G; ++g)
    other[g] = total[g] - p.sizes[l][static_cast<std::size_t>(on[l][g])] -
               p.sizes[l + 1][static_cast<std::size_t>(on[l + 1][g])];
  const int v0 = memory_violation(total, lo, hi);
  double best = pairs_around_two(p, on, l);
  const std::vector<int> keep_a = on[l], keep_b = on[l + 1];
  std::vector<int> best_a = keep_a, best_b = keep_b;
  for (const auto& a : perms)
    for (const auto& b : perms) {
      std::vector<int> t(G);
      for (std::size_t g = 0; g < G; ++g)
        t[g] = other[g] + p.sizes[l][static_cast<std::size_t>(a[g])] + p.sizes[l + 1][static_cast<std::size_t>(b[g])];
      if (memory_violation(t, lo, hi) > v0) continue;
      on[l] = a;
      on[l + 1] = b;
      const double v = pairs_around_two(p, on, l);
      if (v < best - 1e-12 * std::max(1e-30, best)) best = v, best_a = a, best_b = b;
    }
  on[l] = best_a;
  on[l + 1] = best_b;
  return best_a != keep_a || best_b != keep_b;
}

}  // namespace

std::vector<int> memory_totals(const Stage2Problem& p, const std::vector<std::vector<int>>& on) {
  std::vector<int> total(static_cast<std::size_t>(p.ranks), 0);
  for (std::size_t l = 0; l < on.size(); ++l)
    for (std::size_t g = 0; g < total.size(); ++g) total[g] += p.sizes[l][static_cast<std::size_t>(on[l][g])];
  return total;
}

int memory_violation(const std::vector<int>& total, int lo, int hi) {
  int v = 0;
  for (int t : total) v += std::max(0, t - hi) + std::max(0, lo - t);
  return v;
}

void balance_memory(const Stage2Problem& p, std::vector<std::vector<int>>& on, int lo, int hi) {
  for (int step = 0; step < 100000; ++step) {
    const std::vector<int> total = memory_totals(p, on);
    if (memory_violation(total, lo, hi) == 0) return;
    std::size_t bl = 0, bg = 0, bh = 0;
    if (!cheapest_balancing_swap(p, on, total, lo, hi, bl, bg, bh)) return;
    std::swap(on[bl][bg], on[bl][bh]);
  }
}

void exhaustive_layer_pairs(const Stage2Problem& p, std::vector<std::vector<int>>& on, int lo, int hi,
                            const SolverLimits& limits, solver::Clock::time_point deadline) {
  const std::size_t L = on.size();
  const std::vector<std::vector<int>> perms = all_layouts(static_cast<std::size_t>(p.ranks));
  for (int round = 0; round < 50; ++round) {
    bool improved = false;
    for (std::size_t l = 0; l + 1 < L; ++l) {
      if (solver::out_of_time(limits, deadline)) return;
      improved = best_layer_pair(p, on, l, perms, lo, hi) || improved;
    }
    if (!improved) return;
  }
}

}  // namespace moesim::sim::stage2
