// Stage 1 per layer: greedy warm starts, move/swap local search, pair re-partitions by subset sums and
// seeded plateau moves, then (where a gap to the bound remains) a symmetry-broken ILP on GLPK started
// from the best heuristic clustering. Layers are independent; the stage bound is the sum of theirs.
#include "sim/placement/moetuner_stage1.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>

#include "common/error.hpp"
#include "sim/placement/glpk_mip.hpp"
#include "sim/placement/greedy.hpp"
#include "sim/placement/splitmix.hpp"

namespace moesim::sim {

namespace {

using solver::close_to;

// Move and swap local search on sum |T_c - mean|, every cluster kept non-empty.
void stage1_local_search(const std::vector<double>& load, std::vector<int>& cluster, int clusters, int min_size = 1,
                         int max_size = std::numeric_limits<int>::max()) {
  const auto G = static_cast<std::size_t>(clusters);
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / clusters;
  std::vector<double> total(G, 0.0);
  std::vector<int> count(G, 0);
  for (std::size_t e = 0; e < load.size(); ++e) {
    total[static_cast<std::size_t>(cluster[e])] += load[e];
    ++count[static_cast<std::size_t>(cluster[e])];
  }
  auto dev = [&](double t) { return std::fabs(t - mean); };
  for (int iter = 0; iter < 20000; ++iter) {
    double best = -1e-9 * std::max(1.0, mean);
    std::size_t be = 0, bf = 0;
    bool swap = false, found = false;
    for (std::size_t e = 0; e < load.size(); ++e) {
      const auto a = static_cast<std::size_t>(cluster[e]);
      if (total[a] <= mean) continue;  // only an overloaded cluster gives away load
      for (std::size_t b = 0; b < G; ++b) {
        if (b == a || total[b] >= total[a]) continue;
        const double old = dev(total[a]) + dev(total[b]);
        if (count[a] > min_size && count[b] < max_size) {
          const double d = dev(total[a] - load[e]) + dev(total[b] + load[e]) - old;
          if (d < best) best = d, be = e, bf = b, swap = false, found = true;
        }
      }
      for (std::size_t f = 0; f < load.size(); ++f) {
        const auto b = static_cast<std::size_t>(cluster[f]);
        if (b == a || load[f] >= load[e]) continue;
        const double delta = load[e] - load[f];
        if (delta >= total[a] - total[b]) continue;
        const double d = dev(total[a] - delta) + dev(total[b] + delta) - dev(total[a]) - dev(total[b]);
        if (d < best) best = d, be = e, bf = f, swap = true, found = true;
      }
    }
    if (!found) break;
    const auto a = static_cast<std::size_t>(cluster[be]);
    if (swap) {
      const auto b = static_cast<std::size_t>(cluster[bf]);
      const double delta = load[be] - load[bf];
      total[a] -= delta;
      total[b] += delta;
      std::swap(cluster[be], cluster[bf]);
    } else {
      total[a] -= load[be];
      total[bf] += load[be];
      --count[a];
      ++count[bf];
      cluster[be] = static_cast<int>(bf);
    }
  }
}

// reach[i][s]: some subset of the first i of `items` (indices into integer loads) sums to s <= total.
std::vector<std::vector<char>> subset_sums(const std::vector<double>& load, const std::vector<std::size_t>& items,
                                           std::size_t total) {
  const std::size_t n = items.size();
  std::vector<std::vector<char>> reach(n + 1, std::vector<char>(total + 1, 0));
  reach[0][0] = 1;
  for (std::size_t i = 0; i < n; ++i) {
    const auto w = static_cast<std::size_t>(load[items[i]]);
    for (std::size_t s = 0; s <= total; ++s)
      if (reach[i][s]) {
        reach[i + 1][s] = 1;
        if (s + w <= total) reach[i + 1][s + w] = 1;
      }
  }
  return reach;
}

// One subset of `items` summing to `sum` (reach[n][sum] is set): chosen[i] for each item.
std::vector<char> subset_with_sum(const std::vector<std::vector<char>>& reach, const std::vector<double>& load,
                                  const std::vector<std::size_t>& items, std::size_t sum) {
  std::vector<char> chosen(items.size(), 0);
  for (std::size_t i = items.size(); i-- > 0;) {
    if (reach[i][sum]) continue;
    chosen[i] = 1;
    sum -= static_cast<std::size_t>(load[items[i]]);
  }
  return chosen;
}

// The subset of `items` (indices into load) whose load is closest to [lo, hi], neither empty nor all
// of them: by enumeration for up to 10 items (18 when loads are not integers), else by a subset-sum
// table over integer loads. Returns false when neither applies.
bool closest_subset(const std::vector<double>& load, const std::vector<std::size_t>& items, double lo, double hi,
                    std::vector<char>& chosen, double& chosen_sum) {
  const std::size_t n = items.size();
  auto distance = [&](double s) { return s < lo ? lo - s : s > hi ? s - hi : 0.0; };
  chosen.assign(n, 0);
  if (n < 2) return false;
  const bool integral = std::all_of(items.begin(), items.end(),
                                    [&](std::size_t i) { return load[i] == std::floor(load[i]) && load[i] >= 0; });
  if (n <= 10 || (!integral && n <= 18)) {
    double best = std::numeric_limits<double>::infinity();
    std::uint32_t best_mask = 0;
    const std::uint32_t full = (1U << n) - 1;
    for (std::uint32_t mask = 1; mask < full; ++mask) {
      double s = 0.0;
      for (std::size_t i = 0; i < n; ++i)
        if (mask & (1U << i)) s += load[items[i]];
      const double d = distance(s);
      if (d < best) best = d, best_mask = mask, chosen_sum = s;
      if (d == 0.0) break;
    }
    for (std::size_t i = 0; i < n; ++i) chosen[i] = (best_mask >> i) & 1U;
    return true;
  }
  if (!integral) return false;
  double total = 0.0;
  for (std::size_t i : items) total += load[i];
  if (total > 4.0e5) return false;
  const auto S = static_cast<std::size_t>(total);
  const std::vector<std::vector<char>> reach = subset_sums(load, items, S);
  double best = std::numeric_limits<double>::infinity();
  std::size_t best_s = 0;
  for (std::size_t s = 1; s < S; ++s)
    if (reach[n][s] && distance(static_cast<double>(s)) < best) best = distance(static_cast<double>(s)), best_s = s;
  if (!std::isfinite(best)) return false;
  chosen = subset_with_sum(reach, load, items, best_s);
  chosen_sum = static_cast<double>(best_s);
  const auto k = static_cast<std::size_t>(std::count(chosen.begin(), chosen.end(), 1));
  return k > 0 && k < n;
}

// The experts of clusters a and b, by index.
std::vector<std::size_t> members_of(const std::vector<int>& cluster, std::size_t a, std::size_t b) {
  std::vector<std::size_t> items;
  for (std::size_t e = 0; e < cluster.size(); ++e)
    if (cluster[e] == static_cast<int>(a) || cluster[e] == static_cast<int>(b)) items.push_back(e);
  return items;
}

// Re-partitions the union of two clusters, one above and one below the mean, as evenly as a subset
// sum allows; repeated over all such pairs until no pair improves.
void stage1_pair_repartition(const std::vector<double>& load, std::vector<int>& cluster, int clusters) {
  const auto G = static_cast<std::size_t>(clusters);
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / clusters;
  const double eps = 1e-9 * std::max(1.0, mean);
  for (int round = 0; round < 200; ++round) {
    std::vector<double> total(G, 0.0);
    for (std::size_t e = 0; e < load.size(); ++e) total[static_cast<std::size_t>(cluster[e])] += load[e];
    bool improved = false;
    for (std::size_t a = 0; a < G; ++a)
      for (std::size_t b = 0; b < G; ++b) {
        if (total[a] <= mean + eps || total[b] >= mean - eps) continue;
        const double S = total[a] + total[b];
        const double current = std::fabs(total[a] - mean) + std::fabs(total[b] - mean);
        if (current <= std::fabs(S - 2 * mean) + eps) continue;
        const std::vector<std::size_t> items = members_of(cluster, a, b);
        std::vector<char> chosen;
        double ta = 0.0;
        if (!closest_subset(load, items, std::min(mean, S - mean), std::max(mean, S - mean), chosen, ta)) continue;
        const double next = std::fabs(ta - mean) + std::fabs(S - ta - mean);
        if (next >= current - eps) continue;
        for (std::size_t i = 0; i < items.size(); ++i) cluster[items[i]] = static_cast<int>(chosen[i] ? a : b);
        total[a] = ta;
        total[b] = S - ta;
        improved = true;
      }
    if (!improved) return;
  }
}

// One plateau move: clusters a and b (of integer loads) re-split at a subset sum drawn from `rng`
// among those that do not raise the pair's deviation. False when there is no such split.
bool plateau_move(const std::vector<double>& load, std::vector<int>& cluster, std::size_t a, std::size_t b, double mean,
                  double eps, SplitMix& rng) {
  double ta = 0.0, tb = 0.0;
  for (std::size_t e = 0; e < load.size(); ++e) {
    if (cluster[e] == static_cast<int>(a)) ta += load[e];
    if (cluster[e] == static_cast<int>(b)) tb += load[e];
  }
  const std::vector<std::size_t> items = members_of(cluster, a, b);
  const std::size_t n = items.size();
  double S = 0.0;
  for (std::size_t i : items) S += load[i];
  if (n < 2 || S > 4e5) return false;
  const auto Si = static_cast<std::size_t>(S);
  const std::vector<std::vector<char>> reach = subset_sums(load, items, Si);
  const double current = std::fabs(ta - mean) + std::fabs(tb - mean);
  std::vector<std::size_t> targets;
  for (std::size_t s = 1; s < Si; ++s)
    if (reach[n][s] && static_cast<double>(s) != ta &&
        std::fabs(static_cast<double>(s) - mean) + std::fabs(S - static_cast<double>(s) - mean) <= current + eps)
      targets.push_back(s);
  if (targets.empty()) return false;
  const std::vector<char> chosen = subset_with_sum(reach, load, items, targets[rng.below(targets.size())]);
  const auto k = static_cast<std::size_t>(std::count(chosen.begin(), chosen.end(), 1));
  if (k == 0 || k == n) return false;
  for (std::size_t i = 0; i < n; ++i) cluster[items[i]] = static_cast<int>(chosen[i] ? a : b);
  return true;
}

// Plateau moves for integer loads: a seeded random pair of clusters is re-split at a random subset
// sum that does not raise the pair's deviation, then the improving pass runs again; the best
// clustering seen is kept. Stops early at `bound`. Deterministic (own PRNG, fixed iteration count).
void stage1_perturb(const std::vector<double>& load, std::vector<int>& cluster, int clusters, double bound) {
  if (!std::all_of(load.begin(), load.end(), [](double v) { return v == std::floor(v) && v >= 0 && v < 1e6; })) return;
  const auto G = static_cast<std::size_t>(clusters);
  if (G < 2) return;
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / clusters;
  const double eps = 1e-9 * std::max(1.0, mean);
  std::vector<int> best = cluster;
  double best_obj = stage1_layer_objective(load, cluster, clusters);
  SplitMix rng(0x5eed5eedULL + load.size());
  for (int iter = 0; iter < 3000 && best_obj > bound + eps; ++iter) {
    const std::size_t a = rng.below(G);
    std::size_t b = rng.below(G - 1);
    if (b >= a) ++b;
    if (!plateau_move(load, cluster, a, b, mean, eps, rng)) continue;
    if (iter % 8 == 7) stage1_pair_repartition(load, cluster, clusters);
    const double obj = stage1_layer_objective(load, cluster, clusters);
    if (obj < best_obj - eps) best_obj = obj, best = cluster;
  }
  cluster = best;
}

// Relabels clusters by first appearance in `order` (experts by load descending): the form the ILP's
// symmetry breaking admits (the i-th expert in that order sits in a cluster <= i).
std::vector<int> canonical_labels(const std::vector<int>& cluster, const std::vector<std::size_t>& order,
                                  int clusters) {
  std::vector<int> map(static_cast<std::size_t>(clusters), -1);
  int next = 0;
  for (std::size_t e : order) {
    auto& m = map[static_cast<std::size_t>(cluster[e])];
    if (m < 0) m = next++;
  }
  std::vector<int> out(cluster.size());
  for (std::size_t e = 0; e < cluster.size(); ++e) out[e] = map[static_cast<std::size_t>(cluster[e])];
  return out;
}

struct LayerSolve {
  std::vector<int> cluster;
  double objective = 0.0, bound = 0.0;
  bool optimal = false, limit_hit = false, used_glpk = false;
};

// Cluster sizes the layer admits: at least one expert each, or floor/ceil of E / G with equal sizes.
struct SizeRange {
  int min = 1, max = 1;
};

// The greedy warm starts improved by local search (and, without size limits, pair re-partitions and
// plateau moves); bound: stage1_layer_bound.
LayerSolve stage1_heuristic(const std::vector<double>& load, int clusters, bool equal_sizes, SizeRange size) {
  const std::size_t E = load.size();
  const auto G = static_cast<std::size_t>(clusters);
  LayerSolve best;
  for (int cap : {0, static_cast<int>((E + G - 1) / G)}) {
    if (equal_sizes && cap == 0) continue;
    std::vector<int> c = lpt_partition(load, clusters, cap);
    stage1_local_search(load, c, clusters, size.min, size.max);
    if (!equal_sizes) {
      stage1_pair_repartition(load, c, clusters);
      stage1_local_search(load, c, clusters);
    }
    const double obj = stage1_layer_objective(load, c, clusters);
    if (best.cluster.empty() || obj < best.objective) best.cluster = std::move(c), best.objective = obj;
  }
  // Without the size limits the problem is a relaxation: its bound holds for equal sizes too.
  best.bound = stage1_layer_bound(load, clusters);
  if (!equal_sizes && !close_to(best.objective, best.bound)) {
    stage1_perturb(load, best.cluster, clusters, best.bound);
    best.objective = stage1_layer_objective(load, best.cluster, clusters);
  }
  return best;
}

// The layer as an ILP: x[c][e] binary (expert e in cluster c, only c <= e's rank in `order`),
// d[c] >= |T_c - mean| minimised, every cluster's size in `size`.
struct Stage1Mip {
  MipModel model;
  std::vector<int> x;  // [c * E + e]
  std::vector<int> d;  // [c]
};

Stage1Mip stage1_mip(const std::vector<double>& load, int clusters, const std::vector<std::size_t>& order,
                     SizeRange size) {
  const std::size_t E = load.size();
  const auto G = static_cast<std::size_t>(clusters);
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / clusters;
  Stage1Mip mip;
  MipModel& m = mip.model;
  mip.x.resize(G * E);
  std::vector<std::size_t> position(E);
  for (std::size_t i = 0; i < E; ++i) position[order[i]] = i;
  for (std::size_t c = 0; c < G; ++c)
    for (std::size_t e = 0; e < E; ++e) mip.x[c * E + e] = m.add_col(0.0, c <= position[e] ? 1.0 : 0.0, true, 0.0);
  mip.d.resize(G);
  for (std::size_t c = 0; c < G; ++c) mip.d[c] = m.add_col(0.0, std::numeric_limits<double>::infinity(), false, 1.0);
  for (std::size_t e = 0; e < E; ++e) {
    const int r = m.add_row(RowBound::kFixed, 1.0, 1.0);
    for (std::size_t c = 0; c < G; ++c) m.add(r, mip.x[c * E + e], 1.0);
  }
  for (std::size_t c = 0; c < G; ++c) {
    const int nonempty = size.min == size.max ? m.add_row(RowBound::kFixed, size.min, size.min)
                                              : m.add_row(RowBound::kRange, size.min, size.max);
    const int over = m.add_row(RowBound::kLower, -mean, 0.0);  // d - T >= -mean
    const int under = m.add_row(RowBound::kLower, mean, 0.0);  // d + T >= mean
    m.add(over, mip.d[c], 1.0);
    m.add(under, mip.d[c], 1.0);
    for (std::size_t e = 0; e < E; ++e) {
      m.add(nonempty, mip.x[c * E + e], 1.0);
      m.add(over, mip.x[c * E + e], -load[e]);
      m.add(under, mip.x[c * E + e], load[e]);
    }
  }
  return mip;
}

// The ILP's columns for a clustering (canonical labels).
std::vector<double> stage1_mip_start(const Stage1Mip& mip, const std::vector<double>& load, int clusters,
                                     const std::vector<int>& labels) {
  const std::size_t E = load.size();
  const auto G = static_cast<std::size_t>(clusters);
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / clusters;
  std::vector<double> warm(static_cast<std::size_t>(mip.model.cols()), 0.0);
  std::vector<double> total(G, 0.0);
  for (std::size_t e = 0; e < E; ++e) {
    warm[static_cast<std::size_t>(mip.x[static_cast<std::size_t>(labels[e]) * E + e] - 1)] = 1.0;
    total[static_cast<std::size_t>(labels[e])] += load[e];
  }
  for (std::size_t c = 0; c < G; ++c) warm[static_cast<std::size_t>(mip.d[c] - 1)] = std::fabs(total[c] - mean);
  return warm;
}

LayerSolve stage1_layer(const std::vector<double>& load, int clusters, const SolverLimits& limits, double seconds,
                        bool equal_sizes) {
  const std::size_t E = load.size();
  const auto G = static_cast<std::size_t>(clusters);
  std::vector<std::size_t> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return load[a] > load[b]; });
  const SizeRange size = equal_sizes ? SizeRange{static_cast<int>(E / G), static_cast<int>((E + G - 1) / G)}
                                     : SizeRange{1, static_cast<int>(E)};
  LayerSolve best = stage1_heuristic(load, clusters, equal_sizes, size);
  if (close_to(best.objective, best.bound)) {
    best.optimal = true;
    best.cluster = canonical_labels(best.cluster, order, clusters);
    return best;
  }

  const Stage1Mip mip = stage1_mip(load, clusters, order, size);
  best.cluster = canonical_labels(best.cluster, order, clusters);
  best.used_glpk = true;
  const MipOutcome r =
      solve_mip(mip.model, stage1_mip_start(mip, load, clusters, best.cluster), limits.node_limit, seconds);
  best.limit_hit = !r.ran || r.limit_hit;
  if (r.has_solution) {
    std::vector<int> c(E, 0);
    for (std::size_t e = 0; e < E; ++e)
      for (std::size_t k = 0; k < G; ++k)
        if (r.x[static_cast<std::size_t>(mip.x[k * E + e] - 1)] > 0.5) c[e] = static_cast<int>(k);
    const double obj = stage1_layer_objective(load, c, clusters);
    if (obj < best.objective) best.cluster = canonical_labels(c, order, clusters), best.objective = obj;
  }
  if (r.ran && std::isfinite(r.bound)) best.bound = std::max(best.bound, std::min(r.bound, best.objective));
  best.optimal = (r.ran && r.optimal) || close_to(best.objective, best.bound);
  if (best.optimal) best.bound = best.objective;
  return best;
}

}  // namespace

double stage1_layer_objective(const std::vector<double>& load, const std::vector<int>& cluster, int clusters) {
  std::vector<double> total(static_cast<std::size_t>(clusters), 0.0);
  for (std::size_t e = 0; e < load.size(); ++e) total.at(static_cast<std::size_t>(cluster.at(e))) += load[e];
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / clusters;
  double s = 0.0;
  for (double t : total) s += std::fabs(t - mean);
  return s;
}

double stage1_layer_bound(const std::vector<double>& load, int clusters) {
  const double sum = std::accumulate(load.begin(), load.end(), 0.0);
  const double mean = sum / clusters;
  // Every expert above the mean makes its cluster exceed the mean by at least its excess, and the
  // deviations above and below the mean are equal.
  double excess = 0.0;
  for (double v : load) excess += std::max(0.0, v - mean);
  double bound = 2.0 * excess;
  // Integer loads: r clusters one above the rest at best, r = sum mod G.
  const bool integral = std::all_of(load.begin(), load.end(), [](double v) { return v == std::floor(v); });
  if (integral && sum < 9e15) {
    const double r = std::fmod(sum, static_cast<double>(clusters));
    bound = std::max(bound, 2.0 * r * (clusters - r) / clusters);
  }
  return bound;
}

Stage1Result moetuner_stage1(const std::vector<std::vector<double>>& load, int clusters, const SolverLimits& limits,
                             bool equal_sizes) {
  const auto t0 = solver::Clock::now();
  const auto deadline = solver::deadline(t0, limits);
  Stage1Result out;
  bool limit_hit = false;
  for (std::size_t l = 0; l < load.size(); ++l) {
    if (clusters < 1 || load[l].size() < static_cast<std::size_t>(clusters))
      throw common::InputError("moetuner stage 1: " + std::to_string(load[l].size()) + " experts cannot fill " +
                               std::to_string(clusters) + " clusters");
    SolverLimits part = limits;
    if (solver::out_of_time(limits, deadline)) part.node_limit = 1;
    LayerSolve s = stage1_layer(load[l], clusters, part,
                                solver::part_time(limits, deadline, static_cast<int>(load.size() - l)), equal_sizes);
    limit_hit = limit_hit || s.limit_hit;
    out.report.glpk_solves += s.used_glpk ? 1 : 0;
    out.report.parts_optimal += s.optimal ? 1 : 0;
    out.report.objective += s.objective;
    out.report.bound += s.bound;
    out.layer_objective.push_back(s.objective);
    out.layer_bound.push_back(s.bound);
    out.layer_optimal.push_back(s.optimal);
    out.clusters.push_back(std::move(s.cluster));
  }
  out.report.parts = static_cast<int>(load.size());
  out.report.gap = solver::relative_gap(out.report.objective, out.report.bound);
  out.report.status = out.report.parts_optimal == out.report.parts ? "optimal"
                      : limit_hit                                  ? "limit_reached"
                                                                   : "feasible";
  out.report.seconds = solver::seconds_since(t0);
  return out;
}

}  // namespace moesim::sim
