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

// How much swapping the clusters of ranks g and h in layer l can raise the pairs around it: the
// changed rank pairs (rows g and h of pair l, columns g and h of pair l - 1) against each pair's
// current objective `pair` (an upper bound on the rise; 0 when none of them exceeds it).
double swap_rise(const Stage2Problem& p, const std::vector<std::vector<int>>& on, const std::vector<double>& pair,
                 std::size_t l, std::size_t g, std::size_t h) {
  const auto G = static_cast<std::size_t>(p.ranks);
  double rise = 0.0;
  const auto cg = static_cast<std::size_t>(on[l][h]), ch = static_cast<std::size_t>(on[l][g]);  // after the swap
  if (l + 1 < on.size()) {
    const auto& t = p.traffic[l];
    double worst = 0.0;
    for (std::size_t b = 0; b < G; ++b) {
      const auto nb = static_cast<std::size_t>(on[l + 1][b]);
      if (b != g) worst = std::max(worst, t[cg * G + nb] * p.cost[g * G + b]);
      if (b != h) worst = std::max(worst, t[ch * G + nb] * p.cost[h * G + b]);
    }
    rise += std::max(0.0, worst - pair[l]);
  }
  if (l > 0) {
    const auto& t = p.traffic[l - 1];
    double worst = 0.0;
    for (std::size_t a = 0; a < G; ++a) {
      const auto na = static_cast<std::size_t>(on[l - 1][a]);
      if (a != g) worst = std::max(worst, t[na * G + cg] * p.cost[a * G + g]);
      if (a != h) worst = std::max(worst, t[na * G + ch] * p.cost[a * G + h]);
    }
    rise += std::max(0.0, worst - pair[l - 1]);
  }
  return rise;
}

}  // namespace

bool balance_by_path(const Stage2Problem& p, std::vector<std::vector<int>>& on, int lo, int hi) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = on.size();
  const std::vector<int> total = memory_totals(p, on);
  const int v0 = memory_violation(total, lo, hi);
  if (v0 == 0 || G < 2) return false;
  std::vector<double> pair(L > 0 ? L - 1 : 0);
  for (std::size_t l = 0; l + 1 < L; ++l) pair[l] = stage2_pair_objective(p, l, on[l], on[l + 1]);
  // Moving one expert from g to k: the cheapest swap in a layer where g's cluster is one larger, and
  // the cheapest in another layer (a rank's hop out of the path may not use the layer of its hop in:
  // that one changed its cluster there).
  constexpr double inf = std::numeric_limits<double>::infinity();
  struct Hop {
    double w = inf;
    std::size_t l = 0;
  };
  std::vector<Hop> first(G * G), second(G * G);
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t g = 0; g < G; ++g)
      for (std::size_t k = 0; k < G; ++k) {
        if (p.sizes[l][static_cast<std::size_t>(on[l][g])] != p.sizes[l][static_cast<std::size_t>(on[l][k])] + 1)
          continue;
        const Hop h{swap_rise(p, on, pair, l, g, k), l};
        Hop& a1 = first[g * G + k];
        if (h.w < a1.w) {
          second[g * G + k] = a1;
          a1 = h;
        } else if (h.w < second[g * G + k].w) {
          second[g * G + k] = h;
        }
      }
  // From every rank over hi (or, with none, every rank above lo) to the nearest rank under lo (or,
  // with none, below hi): Dijkstra over ranks.
  const bool any_over = std::any_of(total.begin(), total.end(), [&](int t) { return t > hi; });
  const bool any_under = std::any_of(total.begin(), total.end(), [&](int t) { return t < lo; });
  std::vector<double> dist(G, inf);
  std::vector<std::size_t> prev(G, G), via(G, L);
  std::vector<char> done(G, 0);
  for (std::size_t g = 0; g < G; ++g)
    if (any_over ? total[g] > hi : total[g] > lo) dist[g] = 0.0;
  auto target = [&](std::size_t g) { return any_under ? total[g] < lo : total[g] < hi; };
  std::size_t end = G;
  for (std::size_t it = 0; it < G; ++it) {
    std::size_t u = G;
    for (std::size_t g = 0; g < G; ++g)
      if (!done[g] && std::isfinite(dist[g]) && (u == G || dist[g] < dist[u])) u = g;
    if (u == G) break;
    done[u] = 1;
    if (target(u) && prev[u] != G) {
      end = u;
      break;
    }
    for (std::size_t k = 0; k < G; ++k) {
      const Hop& h = first[u * G + k].l != via[u] ? first[u * G + k] : second[u * G + k];
      if (!done[k] && dist[u] + h.w < dist[k]) dist[k] = dist[u] + h.w, prev[k] = u, via[k] = h.l;
    }
  }
  if (end == G) return false;
  const std::vector<std::vector<int>> saved = on;
  for (std::size_t k = end; prev[k] != G; k = prev[k]) std::swap(on[via[k]][prev[k]], on[via[k]][k]);
  if (memory_violation(memory_totals(p, on), lo, hi) >= v0) {
    on = saved;
    return false;
  }
  return true;
}

void balance_within_nodes(const Stage2Problem& p, std::vector<std::vector<int>>& on, int lo, int hi) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = on.size();
  const std::vector<std::vector<std::size_t>> members = stage2_fabric(p).members;
  const double mid = 0.5 * (lo + hi);
  std::vector<double> pair(L > 0 ? L - 1 : 0);
  for (std::size_t l = 0; l + 1 < L; ++l) pair[l] = stage2_pair_objective(p, l, on[l], on[l + 1]);
  std::vector<int> total = memory_totals(p, on);
  for (const auto& m : members)
    for (int step = 0; step < 100000; ++step) {
      if (std::all_of(m.begin(), m.end(), [&](std::size_t g) { return total[g] >= lo && total[g] <= hi; })) break;
      double best_rise = std::numeric_limits<double>::infinity(), best_gain = 0.0;
      std::size_t bl = 0, bg = G, bh = G;
      for (std::size_t l = 0; l < L; ++l)
        for (std::size_t g : m)
          for (std::size_t h : m) {
            const int d =
                p.sizes[l][static_cast<std::size_t>(on[l][g])] - p.sizes[l][static_cast<std::size_t>(on[l][h])];
            if (d <= 0 || total[g] <= total[h]) continue;
            const double a = total[g] - mid, b = total[h] - mid;
            const double gain = a * a + b * b - (a - d) * (a - d) - (b + d) * (b + d);
            if (gain <= 1e-9) continue;
            const double rise = swap_rise(p, on, pair, l, g, h);
            if (rise < best_rise - 1e-15 || (rise <= best_rise + 1e-15 && gain > best_gain))
              best_rise = rise, best_gain = gain, bl = l, bg = g, bh = h;
          }
      if (bg == G) break;
      const int d =
          p.sizes[bl][static_cast<std::size_t>(on[bl][bg])] - p.sizes[bl][static_cast<std::size_t>(on[bl][bh])];
      total[bg] -= d;
      total[bh] += d;
      std::swap(on[bl][bg], on[bl][bh]);
      if (bl > 0) pair[bl - 1] = stage2_pair_objective(p, bl - 1, on[bl - 1], on[bl]);
      if (bl + 1 < L) pair[bl] = stage2_pair_objective(p, bl, on[bl], on[bl + 1]);
    }
}

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
    const int v = memory_violation(total, lo, hi);
    if (v == 0) return;
    // A few experts out: the cheapest chain of one-expert swaps first.
    if (v <= 2 * p.ranks && balance_by_path(p, on, lo, hi)) continue;
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
