// Stage 1 of moetuner_replicated (docs/placement.md): per layer, `replicas` redundant copies go to the
// experts with the highest load per copy (as EPLB replicates), every copy carries its expert's load
// divided by its copy count, and the copies are packed onto the clusters (slot counts differing by at
// most one, no two copies of an expert together) by longest-processing-time first and a swap search.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "common/error.hpp"
#include "sim/placement/moetuner_stage1.hpp"

namespace moesim::sim {

namespace {

struct Packing {
  std::vector<int> expert;   // [copy]
  std::vector<double> load;  // [copy]
  std::vector<int> cluster;  // [copy]
};

double packing_objective(const Packing& k, int clusters, double mean) {
  std::vector<double> total(static_cast<std::size_t>(clusters), 0.0);
  for (std::size_t i = 0; i < k.load.size(); ++i) total[static_cast<std::size_t>(k.cluster[i])] += k.load[i];
  double s = 0.0;
  for (double t : total) s += std::fabs(t - mean);
  return s;
}

// Longest-processing-time first with slot limits: `extra` clusters may hold base + 1 copies, the rest
// base; each copy to the least loaded cluster with room that holds no copy of its expert.
void pack_lpt(Packing& k, int clusters, int experts) {
  const auto G = static_cast<std::size_t>(clusters);
  const std::size_t n = k.load.size();
  const int base = static_cast<int>(n / G);
  const int extra = static_cast<int>(n % G);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return k.load[a] > k.load[b]; });
  std::vector<double> total(G, 0.0);
  std::vector<int> count(G, 0);
  std::vector<char> holds(G * static_cast<std::size_t>(experts), 0);
  int at_extra = 0;
  auto room = [&](std::size_t c) { return count[c] < base || (count[c] == base && at_extra < extra); };
  for (std::size_t i : order) {
    const auto e = static_cast<std::size_t>(k.expert[i]);
    std::size_t best = G;
    for (std::size_t c = 0; c < G; ++c) {
      if (!room(c) || holds[c * static_cast<std::size_t>(experts) + e]) continue;
      if (best == G || total[c] < total[best]) best = c;
    }
    if (best == G)  // every cluster with room already holds this expert: repaired below
      for (std::size_t c = 0; c < G && best == G; ++c)
        if (room(c)) best = c;
    if (count[best] == base) ++at_extra;
    ++count[best];
    total[best] += k.load[i];
    holds[best * static_cast<std::size_t>(experts) + e] = 1;
    k.cluster[i] = static_cast<int>(best);
  }
}

// Two copies of one expert in one cluster: swap one of them with a copy elsewhere whose expert the
// cluster does not hold and whose cluster does not hold this expert. False when no such swap exists.
bool separate_copies(Packing& k, int clusters, int experts) {
  const auto G = static_cast<std::size_t>(clusters);
  const auto E = static_cast<std::size_t>(experts);
  const std::size_t n = k.load.size();
  for (int round = 0; round < 1000; ++round) {
    std::vector<int> copies(G * E, 0);
    for (std::size_t i = 0; i < n; ++i)
      ++copies[static_cast<std::size_t>(k.cluster[i]) * E + static_cast<std::size_t>(k.expert[i])];
    bool fixed_all = true;
    for (std::size_t i = 0; i < n && fixed_all; ++i) {
      const auto a = static_cast<std::size_t>(k.cluster[i]);
      const auto e = static_cast<std::size_t>(k.expert[i]);
      if (copies[a * E + e] < 2) continue;
      fixed_all = false;
      std::size_t pick = n;
      for (std::size_t j = 0; j < n; ++j) {
        const auto b = static_cast<std::size_t>(k.cluster[j]);
        const auto f = static_cast<std::size_t>(k.expert[j]);
        if (b == a || copies[b * E + e] > 0 || copies[a * E + f] > 0) continue;
        if (pick == n || std::fabs(k.load[j] - k.load[i]) < std::fabs(k.load[pick] - k.load[i])) pick = j;
      }
      if (pick == n) return false;
      std::swap(k.cluster[i], k.cluster[pick]);
    }
    if (fixed_all) return true;
  }
  return false;
}

// Improving swaps between the most (least) loaded cluster and any other, keeping copies of an expert
// apart; the best swap each time, until none lowers sum |T - mean|.
void swap_search(Packing& k, int clusters, int experts, double mean) {
  const auto G = static_cast<std::size_t>(clusters);
  const auto E = static_cast<std::size_t>(experts);
  const std::size_t n = k.load.size();
  std::vector<double> total(G, 0.0);
  std::vector<int> copies(G * E, 0);
  for (std::size_t i = 0; i < n; ++i) {
    total[static_cast<std::size_t>(k.cluster[i])] += k.load[i];
    ++copies[static_cast<std::size_t>(k.cluster[i]) * E + static_cast<std::size_t>(k.expert[i])];
  }
  const double eps = 1e-9 * std::max(1.0, mean);
  auto dev = [&](double t) { return std::fabs(t - mean); };
  for (int iter = 0; iter < 20000; ++iter) {
    const auto hi = static_cast<std::size_t>(std::max_element(total.begin(), total.end()) - total.begin());
    const auto lo = static_cast<std::size_t>(std::min_element(total.begin(), total.end()) - total.begin());
    double best = -eps;
    std::size_t bi = n, bj = n;
    for (std::size_t i = 0; i < n; ++i) {
      const auto a = static_cast<std::size_t>(k.cluster[i]);
      for (std::size_t j = 0; j < n; ++j) {
        const auto b = static_cast<std::size_t>(k.cluster[j]);
        if (a == b || (a != hi && b != lo) || k.load[i] <= k.load[j]) continue;
        const auto e = static_cast<std::size_t>(k.expert[i]), f = static_cast<std::size_t>(k.expert[j]);
        if (e == f || copies[b * E + e] > 0 || copies[a * E + f] > 0) continue;
        const double delta = k.load[i] - k.load[j];
        const double d = dev(total[a] - delta) + dev(total[b] + delta) - dev(total[a]) - dev(total[b]);
        if (d < best) best = d, bi = i, bj = j;
      }
    }
    if (bi == n) return;
    const auto a = static_cast<std::size_t>(k.cluster[bi]), b = static_cast<std::size_t>(k.cluster[bj]);
    const double delta = k.load[bi] - k.load[bj];
    total[a] -= delta;
    total[b] += delta;
    --copies[a * E + static_cast<std::size_t>(k.expert[bi])];
    ++copies[b * E + static_cast<std::size_t>(k.expert[bi])];
    --copies[b * E + static_cast<std::size_t>(k.expert[bj])];
    ++copies[a * E + static_cast<std::size_t>(k.expert[bj])];
    std::swap(k.cluster[bi], k.cluster[bj]);
  }
}

// With these copies and slot counts of floor(n/G) or more per cluster, the busiest cluster holds at
// least the largest copy and floor(n/G) - 1 others, and (pigeonhole) two of the G + 1 largest copies
// with floor(n/G) - 2 others; every copy at least the smallest ones. sum |T - mean| >= 2 (T_max - mean).
double packing_bound(std::vector<double> copies, int clusters, double mean) {
  const std::size_t n = copies.size();
  const auto G = static_cast<std::size_t>(clusters);
  if (n == 0 || G == 0) return 0.0;
  std::sort(copies.begin(), copies.end(), std::greater<>());
  const std::size_t k = n / G;
  auto smallest = [&](std::size_t m, std::size_t used) {  // m smallest copies beyond the first `used`
    double s = 0.0;
    for (std::size_t i = 0; i < m && i + used < n; ++i) s += copies[n - 1 - i];
    return s;
  };
  double busiest = copies[0] + (k >= 1 ? smallest(k - 1, 1) : 0.0);
  if (n > G) busiest = std::max(busiest, copies[G - 1] + copies[G] + (k >= 2 ? smallest(k - 2, G + 1) : 0.0));
  return 2.0 * std::max(0.0, busiest - mean);
}

void check_replicas(int experts, int clusters, int replicas) {
  if (clusters < 1 || replicas < 0 || experts + replicas < clusters ||
      static_cast<long>(replicas) > static_cast<long>(experts) * (clusters - 1))
    throw common::InputError("moetuner_replicated: " + std::to_string(experts) + " experts and " +
                             std::to_string(replicas) + " replicas cannot fill " + std::to_string(clusters) +
                             " ranks with at most one copy of an expert per rank (expected " +
                             std::to_string(std::max(0, clusters - experts)) + " to " +
                             std::to_string(static_cast<long>(experts) * (clusters - 1)) + " replicas)");
}

// One layer's copies (replica_counts) packed: LPT, copies of one expert pulled apart, swap search.
Packing pack_layer(const std::vector<double>& layer, int clusters, int replicas, double mean) {
  const int E = static_cast<int>(layer.size());
  const std::vector<int> count = replica_counts(layer, replicas, clusters);
  Packing k;
  for (int e = 0; e < E; ++e)
    for (int c = 0; c < count[static_cast<std::size_t>(e)]; ++c) {
      k.expert.push_back(e);
      k.load.push_back(layer[static_cast<std::size_t>(e)] / count[static_cast<std::size_t>(e)]);
    }
  k.cluster.assign(k.load.size(), 0);
  pack_lpt(k, clusters, E);
  if (!separate_copies(k, clusters, E))
    // Copies grouped by expert dealt round-robin: at most `clusters` copies of one expert, so they
    // land on distinct clusters, and slot counts differ by at most one.
    for (std::size_t i = 0; i < k.cluster.size(); ++i)
      k.cluster[i] = static_cast<int>(i % static_cast<std::size_t>(clusters));
  swap_search(k, clusters, E, mean);
  return k;
}

}  // namespace

std::vector<int> replica_counts(const std::vector<double>& load, int replicas, int max_copies) {
  std::vector<int> count(load.size(), 1);
  for (int r = 0; r < replicas; ++r) {
    std::size_t best = load.size();
    for (std::size_t e = 0; e < load.size(); ++e)
      if (count[e] < max_copies && (best == load.size() || load[e] / count[e] > load[best] / count[best])) best = e;
    if (best == load.size()) throw std::logic_error("replica_counts: more replicas than ranks can hold");
    ++count[best];
  }
  return count;
}

double stage1_replicated_bound(const std::vector<double>& load, int clusters, int replicas) {
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / clusters;
  // A copy above the mean pushes its cluster at least that far above it, so the deviation is at
  // least 2 x sum_e (P_e - r_e x mean)^+; each replica lowers that sum by at most min(mean, the
  // expert's rest), so giving each to the largest rest minimises it (the terms are convex in r_e).
  std::vector<double> rest(load.size());
  std::vector<int> count(load.size(), 1);
  for (std::size_t e = 0; e < load.size(); ++e) rest[e] = std::max(0.0, load[e] - mean);
  for (int r = 0; r < replicas; ++r) {
    std::size_t best = load.size();
    for (std::size_t e = 0; e < load.size(); ++e)
      if (count[e] < clusters && rest[e] > 0 && (best == load.size() || rest[e] > rest[best])) best = e;
    if (best == load.size()) break;
    rest[best] = std::max(0.0, rest[best] - mean);
    ++count[best];
  }
  return 2.0 * std::accumulate(rest.begin(), rest.end(), 0.0);
}

ReplicatedStage1Result moetuner_stage1_replicated(const std::vector<std::vector<double>>& load, int clusters,
                                                  int replicas) {
  const auto t0 = solver::Clock::now();
  ReplicatedStage1Result out;
  for (const auto& layer : load) {
    const int E = static_cast<int>(layer.size());
    check_replicas(E, clusters, replicas);
    const double mean = std::accumulate(layer.begin(), layer.end(), 0.0) / clusters;
    const Packing k = pack_layer(layer, clusters, replicas, mean);
    const double obj = packing_objective(k, clusters, mean);
    const double bound = std::min(
        obj, std::max(stage1_replicated_bound(layer, clusters, replicas), packing_bound(k.load, clusters, mean)));
    std::vector<std::vector<int>> on(static_cast<std::size_t>(E));
    for (std::size_t i = 0; i < k.load.size(); ++i) on[static_cast<std::size_t>(k.expert[i])].push_back(k.cluster[i]);
    for (auto& v : on) std::sort(v.begin(), v.end());
    out.clusters.push_back(std::move(on));
    out.layer_objective.push_back(obj);
    out.layer_bound.push_back(bound);
    out.report.objective += obj;
    out.report.bound += bound;
    out.report.parts_optimal += obj <= bound + 1e-9 * std::max(1.0, obj) ? 1 : 0;
  }
  out.report.parts = static_cast<int>(load.size());
  out.report.gap = solver::relative_gap(out.report.objective, out.report.bound);
  out.report.status = out.report.parts_optimal == out.report.parts ? "optimal" : "feasible";
  out.report.seconds = solver::seconds_since(t0);
  return out;
}

double stage1_replicated_objective(const std::vector<double>& load, const std::vector<std::vector<int>>& clusters_of,
                                   int clusters) {
  std::vector<double> total(static_cast<std::size_t>(clusters), 0.0);
  for (std::size_t e = 0; e < load.size(); ++e)
    for (int c : clusters_of.at(e))
      total.at(static_cast<std::size_t>(c)) += load[e] / static_cast<double>(clusters_of[e].size());
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / clusters;
  double s = 0.0;
  for (double t : total) s += std::fabs(t - mean);
  return s;
}

}  // namespace moesim::sim
