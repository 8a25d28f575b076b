// The stage-2 tie-break (docs/placement.md): among layouts of equal pair objectives, the one of least
// total transfer, one layer at a time with its neighbours fixed (a min-cost assignment over the
// entries that raise neither neighbouring bottleneck nor leave the memory range).
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "sim/placement/moetuner_stage2.hpp"

namespace moesim::sim {

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

// Layer l's surroundings, its neighbours fixed: each rank's expert total over all layers, and per
// (cluster, rank) the worst and summed transfers with the layer before (wl, sl) and after (wr, sr);
// tl and tr are the worst of those on the layer's current layout (its bottlenecks).
struct LayerSurroundings {
  std::vector<double> wl, sl, wr, sr;
  std::vector<int> total;
  double tl = 0.0, tr = 0.0;
};

LayerSurroundings surroundings(const Stage2Problem& p, const std::vector<std::vector<int>>& cluster_on, std::size_t l) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = cluster_on.size();
  LayerSurroundings s;
  s.total.assign(G, 0);
  for (std::size_t m = 0; m < L; ++m)
    for (std::size_t g = 0; g < G; ++g) s.total[g] += p.sizes[m][static_cast<std::size_t>(cluster_on[m][g])];
  if (l > 0) neighbour_weights(p, l, cluster_on[l - 1], true, s.wl, s.sl);
  if (l + 1 < L) neighbour_weights(p, l, cluster_on[l + 1], false, s.wr, s.sr);
  for (std::size_t g = 0; g < G; ++g) {
    const std::size_t i = static_cast<std::size_t>(cluster_on[l][g]) * G + g;
    if (l > 0) s.tl = std::max(s.tl, s.wl[i]);
    if (l + 1 < L) s.tr = std::max(s.tr, s.wr[i]);
  }
  return s;
}

// Layer l re-solved for volume, its neighbours fixed. True when it changed.
bool tie_break_layer(const Stage2Problem& p, std::vector<std::vector<int>>& cluster_on, std::size_t l, int lo, int hi) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = cluster_on.size();
  const std::vector<int>& now = cluster_on[l];
  const LayerSurroundings su = surroundings(p, cluster_on, l);
  const auto &wl = su.wl, &sl = su.sl, &wr = su.wr, &sr = su.sr;
  const auto& total = su.total;
  const double tl = su.tl, tr = su.tr;
  std::vector<double> cost(G * G);
  std::vector<char> allowed(G * G);
  double before = 0.0;
  for (std::size_t g = 0; g < G; ++g) {
    const std::size_t i = static_cast<std::size_t>(now[g]) * G + g;
    if (l > 0) before += sl[i];
    if (l + 1 < L) before += sr[i];
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
  if (next.empty() || next == now) return false;
  double after = 0.0;
  for (std::size_t g = 0; g < G; ++g) after += cost[static_cast<std::size_t>(next[g]) * G + g];
  // Rounding must not cycle between layouts of equal volume.
  if (after >= before - 1e-9 * before) return false;
  cluster_on[l] = std::move(next);
  return true;
}

// Layer l re-solved to bring the ranks' expert totals toward the mean, its neighbours fixed, over the
// entries that raise neither neighbouring bottleneck: the least sum of squared deviations (a
// min-cost assignment, the deviation being separable per rank). True when it lowered that sum.
bool balance_layer(const Stage2Problem& p, std::vector<std::vector<int>>& cluster_on, std::size_t l, double target) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = cluster_on.size();
  const std::vector<int>& now = cluster_on[l];
  const LayerSurroundings su = surroundings(p, cluster_on, l);
  const auto &wl = su.wl, &wr = su.wr;
  const auto& total = su.total;
  const double tl = su.tl, tr = su.tr;
  std::vector<double> cost(G * G);
  std::vector<char> allowed(G * G);
  double before = 0.0;
  for (std::size_t g = 0; g < G; ++g) before += (total[g] - target) * (total[g] - target);
  for (std::size_t c = 0; c < G; ++c)
    for (std::size_t g = 0; g < G; ++g) {
      const std::size_t i = c * G + g;
      const double next = total[g] - p.sizes[l][static_cast<std::size_t>(now[g])] + p.sizes[l][c];
      allowed[i] = (l == 0 || wl[i] <= tl) && (l + 1 == L || wr[i] <= tr) ? 1 : 0;
      cost[i] = (next - target) * (next - target);
    }
  std::vector<int> next = min_cost_assignment(G, cost, allowed);
  if (next.empty() || next == now) return false;
  double after = 0.0;
  for (std::size_t g = 0; g < G; ++g) after += cost[static_cast<std::size_t>(next[g]) * G + g];
  if (after >= before - 1e-9) return false;
  cluster_on[l] = std::move(next);
  return true;
}

}  // namespace

int stage2_balance_within_bottlenecks(const Stage2Problem& p, std::vector<std::vector<int>>& cluster_on, int lo,
                                      int hi, int sweeps) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = cluster_on.size();
  if (L < 1 || G < 2) return 0;
  const double target = 0.5 * (lo + hi);
  int changes = 0;
  for (int sweep = 0; sweep < sweeps; ++sweep) {
    bool any = false;
    for (std::size_t k = 0; k < L; ++k) {
      const std::size_t l = sweep % 2 == 0 ? k : L - 1 - k;
      if (!balance_layer(p, cluster_on, l, target)) continue;
      ++changes;
      any = true;
    }
    if (!any) break;
  }
  return changes;
}

int stage2_tie_break(const Stage2Problem& p, std::vector<std::vector<int>>& cluster_on, int lo, int hi, int sweeps) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = cluster_on.size();
  if (L < 2 || G < 2) return 0;
  int changes = 0;
  for (int sweep = 0; sweep < sweeps; ++sweep) {
    bool any = false;
    for (std::size_t k = 0; k < L; ++k) {
      const std::size_t l = sweep % 2 == 0 ? k : L - 1 - k;
      if (!tie_break_layer(p, cluster_on, l, lo, hi)) continue;
      ++changes;
      any = true;
    }
    if (!any) break;
  }
  return changes;
}

}  // namespace moesim::sim
