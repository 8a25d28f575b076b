// The heuristic placement policies (random, greedy, eplb), the shared input checks and the cost
// model the solvers and the evaluation share. No GLPK here: the ILP lives in placement_ilp.cpp.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>

#include "common/error.hpp"
#include "common/files.hpp"
#include "models/costs.hpp"
#include "sim/placement_common.hpp"
#include "sim/placement_solvers.hpp"

namespace moesim::sim {

namespace fs = std::filesystem;
using common::InputError;

namespace detail {

namespace {

// The name when the config is the shipped one of that name, else its absolute path (what a
// placement file stores, so that it loads again from anywhere).
std::string config_reference(std::string_view kind, const std::string& name, const std::string& source_file) {
  if (source_file.empty()) return name;
  std::error_code ec;
  try {
    if (fs::equivalent(common::resolve_config(kind, name), source_file, ec)) return name;
  } catch (const InputError&) {
    // not a shipped name
  }
  return fs::weakly_canonical(fs::absolute(source_file), ec).string();
}

}  // namespace

Placement placement_skeleton(const PlacementInput& input, const std::string& policy, bool needs_routing) {
  const std::string where = "placement policy " + policy;
  const auto& arch = input.arch;
  if (!arch.is_moe()) throw InputError(where + ": architecture " + arch.name + " is dense: it has no experts to place");
  if (input.ep < 1) throw InputError(where + ": ep must be at least 1, got " + std::to_string(input.ep));
  const int tp = input.tp;
  const int per_node = input.cluster.gpus_per_node;
  if (tp < 1 || (tp & (tp - 1)) != 0 || per_node % tp != 0)
    throw InputError(where + ": expected --tp to be a power of two dividing the " + std::to_string(per_node) +
                     " GPUs per node of cluster " + input.cluster.name + ", got " + std::to_string(tp));
  const long group = static_cast<long>(input.ep) * tp;
  if (group > input.cluster.total_gpus() || input.cluster.total_gpus() % group != 0)
    throw InputError(where + ": expected ep x tp (" + std::to_string(input.ep) + " x " + std::to_string(tp) + " = " +
                     std::to_string(group) + " GPUs) to divide the " + std::to_string(input.cluster.total_gpus()) +
                     " GPUs of cluster " + input.cluster.name + " (for example --ep " +
                     std::to_string(input.cluster.total_gpus() / tp) + " with --tp " + std::to_string(tp) + ")");
  if (needs_routing) {
    if (!input.routing) throw InputError(where + " is solved on routing statistics: give a trace (--trace)");
    const RoutingCounts& r = *input.routing;
    if (r.layers != arch.moe_layers || r.num_experts != arch.num_experts || r.top_k != arch.top_k)
      throw InputError(where + ": the trace's routing shape (" + std::to_string(r.layers.size()) + " MoE layers, " +
                       std::to_string(r.num_experts) + " experts, top-" + std::to_string(r.top_k) +
                       ") does not match architecture " + arch.name + " (" + std::to_string(arch.moe_layers.size()) +
                       " MoE layers, " + std::to_string(arch.num_experts) + " experts, top-" +
                       std::to_string(arch.top_k) + ")");
    if (r.tokens == 0) throw InputError(where + ": the trace has no tokens to profile");
  }
  Placement p;
  p.architecture = config_reference("architectures", arch.name, arch.source_file);
  p.cluster = config_reference("clusters", input.cluster.name, input.cluster.source_file);
  p.ep = input.ep;
  p.tp = tp;
  p.policy = policy;
  p.trace_sha256 = input.routing && needs_routing ? input.routing->trace_sha256 : "";
  p.layers = arch.moe_layers;
  p.ranks.assign(p.layers.size(), std::vector<std::vector<int>>(static_cast<std::size_t>(arch.num_experts)));
  return p;
}

}  // namespace detail

namespace {

using detail::placement_skeleton;

// splitmix64: the same stream on every platform (std:: distributions are not portable).
class SplitMix {
 public:
  explicit SplitMix(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }

 private:
  std::uint64_t state_;
};

class RandomPolicy final : public PlacementPolicy {
 public:
  std::string name() const override { return "random"; }
  bool needs_routing() const override { return false; }
  Placement place(const PlacementInput& input) const override {
    Placement p = placement_skeleton(input, name(), false);
    const auto experts = static_cast<std::size_t>(input.arch.num_experts);
    SplitMix rng(input.options.seed);
    for (auto& layer : p.ranks) {
      std::vector<int> order(experts);
      std::iota(order.begin(), order.end(), 0);
      for (std::size_t i = experts; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
      // Dealt like contiguous (balanced counts), in shuffled order.
      for (std::size_t i = 0; i < experts; ++i)
        layer[static_cast<std::size_t>(order[i])] = {
            static_cast<int>(i * static_cast<std::size_t>(input.ep) / experts)};
    }
    p.report = {{"seed", input.options.seed}};
    return p;
  }
};

class GreedyPolicy final : public PlacementPolicy {
 public:
  std::string name() const override { return "greedy"; }
  bool needs_routing() const override { return true; }
  Placement place(const PlacementInput& input) const override {
    Placement p = placement_skeleton(input, name(), true);
    const int cap = (input.arch.num_experts + input.ep - 1) / input.ep;
    double max_sum = 0.0, mean_sum = 0.0;
    for (std::size_t l = 0; l < p.ranks.size(); ++l) {
      const auto& load = input.routing->load[l];
      const std::vector<int> bin = lpt_partition(load, input.ep, cap);
      std::vector<double> per_rank(static_cast<std::size_t>(input.ep), 0.0);
      for (std::size_t e = 0; e < bin.size(); ++e) {
        p.ranks[l][e] = {bin[e]};
        per_rank[static_cast<std::size_t>(bin[e])] += load[e];
      }
      max_sum += *std::max_element(per_rank.begin(), per_rank.end());
      mean_sum += std::accumulate(per_rank.begin(), per_rank.end(), 0.0) / input.ep;
    }
    p.report = {{"experts_per_rank_cap", cap}, {"profiled_max_over_mean", mean_sum > 0 ? max_sum / mean_sum : 1.0}};
    return p;
  }
};

// EPLB's packing may put two replicas of one expert on one GPU, which a placement (and the engines'
// maps) cannot hold. Each such slot is swapped with the slot of closest load per replica on another
// GPU (same node first) where neither GPU then holds a duplicate. Returns the swaps made.
int separate_duplicate_replicas(std::vector<int>& phy2log, const std::vector<int>& count,
                                const std::vector<double>& load, int per_gpu, int gpus_per_node) {
  const int slots = static_cast<int>(phy2log.size());
  auto gpu_of = [&](int s) { return s / per_gpu; };
  auto holds = [&](int gpu, int expert, int except) {
    for (int s = gpu * per_gpu; s < (gpu + 1) * per_gpu; ++s)
      if (s != except && phy2log[static_cast<std::size_t>(s)] == expert) return true;
    return false;
  };
  auto slot_load = [&](int s) {
    const auto e = static_cast<std::size_t>(phy2log[static_cast<std::size_t>(s)]);
    return load[e] / std::max(1, count[e]);
  };
  int swaps = 0;
  for (int s = 0; s < slots; ++s) {
    const int g = gpu_of(s);
    const int e = phy2log[static_cast<std::size_t>(s)];
    if (!holds(g, e, s) || s == g * per_gpu) continue;  // keep the first copy on the GPU
    bool dup_before = false;
    for (int q = g * per_gpu; q < s; ++q) dup_before = dup_before || phy2log[static_cast<std::size_t>(q)] == e;
    if (!dup_before) continue;
    int best = -1;
    double best_cost = 0.0;
    for (int t = 0; t < slots; ++t) {
      const int h = gpu_of(t);
      const int f = phy2log[static_cast<std::size_t>(t)];
      if (h == g || f == e || holds(g, f, s) || holds(h, e, t)) continue;
      const double cost = std::fabs(slot_load(s) - slot_load(t)) +
                          (h / std::max(1, gpus_per_node) == g / std::max(1, gpus_per_node) ? 0.0 : 1e300);
      if (best < 0 || cost < best_cost) best = t, best_cost = cost;
    }
    if (best < 0) continue;
    std::swap(phy2log[static_cast<std::size_t>(s)], phy2log[static_cast<std::size_t>(best)]);
    ++swaps;
  }
  return swaps;
}

class EplbPolicy final : public PlacementPolicy {
 public:
  std::string name() const override { return "eplb"; }
  bool needs_routing() const override { return true; }
  Placement place(const PlacementInput& input) const override {
    Placement p = placement_skeleton(input, name(), true);
    const auto& arch = input.arch;
    const int replicas = input.options.replicas;
    if (replicas < 0) throw InputError("eplb: --replicas must be 0 or more, got " + std::to_string(replicas));
    const int slots = arch.num_experts + replicas;
    const int groups = input.options.groups > 0 ? input.options.groups : std::max(1, arch.routing_groups);
    const int ranks_per_node = std::max(1, input.cluster.gpus_per_node / input.tp);
    const int nodes = std::max(1, (input.ep + ranks_per_node - 1) / ranks_per_node);
    if (slots % input.ep != 0) {
      const int up = (slots + input.ep - 1) / input.ep * input.ep - arch.num_experts;
      throw InputError("eplb: " + std::to_string(arch.num_experts) + " experts + " + std::to_string(replicas) +
                       " replicas = " + std::to_string(slots) + " slots per layer do not divide over " +
                       std::to_string(input.ep) + " EP ranks; use --replicas " + std::to_string(up));
    }
    EplbMap map = eplb_rebalance(input.routing->load, slots, groups, nodes, input.ep);
    const int per_rank = slots / input.ep;
    int repaired = 0;
    for (std::size_t l = 0; l < map.phy2log.size(); ++l)
      repaired += separate_duplicate_replicas(map.phy2log[l], map.replica_count[l], input.routing->load[l], per_rank,
                                              ranks_per_node);
    int collapsed = 0;
    for (std::size_t l = 0; l < p.ranks.size(); ++l)
      for (std::size_t s = 0; s < map.phy2log[l].size(); ++s) {
        auto& holders = p.ranks[l][static_cast<std::size_t>(map.phy2log[l][s])];
        const int rank = static_cast<int>(s) / per_rank;
        // EPLB may pack two replicas of one expert on one GPU; the placement keeps one copy.
        if (std::find(holders.begin(), holders.end(), rank) != holders.end()) {
          ++collapsed;
          continue;
        }
        holders.push_back(rank);
      }
    for (auto& layer : p.ranks)
      for (auto& holders : layer) std::sort(holders.begin(), holders.end());
    p.report = {{"replicas", replicas},
                {"slots_per_layer", slots},
                {"groups", groups},
                {"nodes", nodes},
                {"hierarchical", map.hierarchical},
                {"separated_replicas", repaired},
                {"collapsed_replicas", collapsed}};
    return p;
  }
};

// deepseek-ai/EPLB balanced_packing on one row: items by weight descending (stable), each to the
// lightest pack with room. Returns pack and rank inside the pack per item.
void balanced_packing(const std::vector<double>& weight, int packs, std::vector<int>& pack, std::vector<int>& rank) {
  const std::size_t n = weight.size();
  const int per_pack = static_cast<int>(n) / packs;
  pack.assign(n, 0);
  rank.assign(n, 0);
  if (per_pack == 1) {
    std::iota(pack.begin(), pack.end(), 0);
    return;
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return weight[a] > weight[b]; });
  std::vector<double> pack_weight(static_cast<std::size_t>(packs), 0.0);
  std::vector<int> pack_items(static_cast<std::size_t>(packs), 0);
  for (std::size_t item : order) {
    int best = -1;
    for (int q = 0; q < packs; ++q)
      if (pack_items[static_cast<std::size_t>(q)] < per_pack &&
          (best < 0 || pack_weight[static_cast<std::size_t>(q)] < pack_weight[static_cast<std::size_t>(best)]))
        best = q;
    pack[item] = best;
    rank[item] = pack_items[static_cast<std::size_t>(best)]++;
    pack_weight[static_cast<std::size_t>(best)] += weight[item];
  }
}

// deepseek-ai/EPLB replicate_experts on one row: each redundant slot to the expert with the highest
// load per replica (first such expert on ties).
void replicate_experts(const std::vector<double>& weight, int physical, std::vector<int>& phy2log,
                       std::vector<int>& phy_rank, std::vector<int>& count) {
  const int logical = static_cast<int>(weight.size());
  phy2log.resize(static_cast<std::size_t>(physical));
  phy_rank.assign(static_cast<std::size_t>(physical), 0);
  count.assign(weight.size(), 1);
  std::iota(phy2log.begin(), phy2log.begin() + logical, 0);
  for (int s = logical; s < physical; ++s) {
    std::size_t best = 0;
    for (std::size_t e = 1; e < weight.size(); ++e)
      if (weight[e] / count[e] > weight[best] / count[best]) best = e;
    phy2log[static_cast<std::size_t>(s)] = static_cast<int>(best);
    phy_rank[static_cast<std::size_t>(s)] = count[best]++;
  }
}

}  // namespace

std::vector<int> lpt_partition(const std::vector<double>& load, int bins, int cap) {
  if (bins < 1) throw std::invalid_argument("lpt_partition: bins < 1");
  std::vector<std::size_t> order(load.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return load[a] > load[b]; });
  std::vector<double> total(static_cast<std::size_t>(bins), 0.0);
  std::vector<int> items(static_cast<std::size_t>(bins), 0);
  std::vector<int> bin(load.size(), 0);
  for (std::size_t e : order) {
    int best = -1;
    for (int b = 0; b < bins; ++b) {
      const auto bi = static_cast<std::size_t>(b);
      if (cap > 0 && items[bi] >= cap) continue;
      // Empty bins first, so that every bin gets an expert when there are enough.
      if (best < 0 || (items[bi] == 0) > (items[static_cast<std::size_t>(best)] == 0) ||
          ((items[bi] == 0) == (items[static_cast<std::size_t>(best)] == 0) &&
           total[bi] < total[static_cast<std::size_t>(best)]))
        best = b;
    }
    bin[e] = best;
    total[static_cast<std::size_t>(best)] += load[e];
    ++items[static_cast<std::size_t>(best)];
  }
  return bin;
}

EplbMap eplb_rebalance(const std::vector<std::vector<double>>& weight, int slots, int groups, int nodes, int gpus) {
  if (weight.empty()) throw InputError("eplb: no layers to balance");
  const int experts = static_cast<int>(weight[0].size());
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw InputError("eplb: " + what);
  };
  require(experts > 0 && slots >= experts, "expected at least one slot per expert, got " + std::to_string(slots) +
                                               " slots for " + std::to_string(experts) + " experts");
  require(gpus > 0 && slots % gpus == 0,
          std::to_string(slots) + " slots do not divide over " + std::to_string(gpus) + " GPUs");
  require(groups > 0 && experts % groups == 0,
          std::to_string(groups) + " groups do not divide " + std::to_string(experts) + " experts (use --groups 1)");
  require(nodes > 0 && gpus % nodes == 0,
          std::to_string(gpus) + " GPUs do not divide over " + std::to_string(nodes) + " nodes");
  EplbMap out;
  out.hierarchical = groups % nodes == 0;
  if (!out.hierarchical) groups = nodes = 1;
  const int group_size = experts / groups;
  const int groups_per_node = groups / nodes;
  const int per_gpu = slots / gpus;
  const int node_experts = experts / nodes;
  const int node_slots = slots / nodes;
  require(node_slots >= node_experts, "fewer slots than experts on a node");
  for (const auto& row : weight) {
    require(static_cast<int>(row.size()) == experts, "layers with different expert counts");
    // Step 1: expert groups to nodes.
    std::vector<double> group_load(static_cast<std::size_t>(groups), 0.0);
    for (int e = 0; e < experts; ++e)
      group_load[static_cast<std::size_t>(e / group_size)] += row[static_cast<std::size_t>(e)];
    std::vector<int> gpack, grank;
    balanced_packing(group_load, nodes, gpack, grank);
    std::vector<int> log2mlog(static_cast<std::size_t>(experts)), mlog2log(static_cast<std::size_t>(experts));
    for (int e = 0; e < experts; ++e) {
      const auto g = static_cast<std::size_t>(e / group_size);
      log2mlog[static_cast<std::size_t>(e)] = (gpack[g] * groups_per_node + grank[g]) * group_size + e % group_size;
    }
    for (int e = 0; e < experts; ++e) mlog2log[static_cast<std::size_t>(log2mlog[static_cast<std::size_t>(e)])] = e;
    std::vector<int> layer_phy2log(static_cast<std::size_t>(slots));
    std::vector<int> counts(static_cast<std::size_t>(experts), 0);
    for (int n = 0; n < nodes; ++n) {
      // Step 2: replicas inside the node.
      std::vector<double> mlog_load(static_cast<std::size_t>(node_experts));
      for (int i = 0; i < node_experts; ++i)
        mlog_load[static_cast<std::size_t>(i)] =
            row[static_cast<std::size_t>(mlog2log[static_cast<std::size_t>(n * node_experts + i)])];
      std::vector<int> phy2mlog, phy_rank, mlog_count;
      replicate_experts(mlog_load, node_slots, phy2mlog, phy_rank, mlog_count);
      // Step 3: physical experts to the node's GPUs.
      std::vector<double> phy_load(static_cast<std::size_t>(node_slots));
      for (int s = 0; s < node_slots; ++s) {
        const auto m = static_cast<std::size_t>(phy2mlog[static_cast<std::size_t>(s)]);
        phy_load[static_cast<std::size_t>(s)] = mlog_load[m] / mlog_count[m];
      }
      std::vector<int> pack, rank;
      balanced_packing(phy_load, gpus / nodes, pack, rank);
      for (int s = 0; s < node_slots; ++s) {
        const int pphy = pack[static_cast<std::size_t>(s)] * per_gpu + rank[static_cast<std::size_t>(s)];
        const int mlog = phy2mlog[static_cast<std::size_t>(s)] + n * node_experts;
        layer_phy2log[static_cast<std::size_t>(n * node_slots + pphy)] = mlog2log[static_cast<std::size_t>(mlog)];
      }
      for (int i = 0; i < node_experts; ++i)
        counts[static_cast<std::size_t>(mlog2log[static_cast<std::size_t>(n * node_experts + i)])] =
            mlog_count[static_cast<std::size_t>(i)];
    }
    out.phy2log.push_back(std::move(layer_phy2log));
    out.replica_count.push_back(std::move(counts));
  }
  return out;
}

std::vector<int> rank_nodes(const models::Cluster& cluster, int ep, int tp) {
  std::vector<int> node(static_cast<std::size_t>(ep));
  for (int r = 0; r < ep; ++r) node[static_cast<std::size_t>(r)] = cluster.node_of(r * tp);
  return node;
}

std::vector<double> rank_token_cost(const models::Architecture& arch, const models::Cluster& cluster, int ep, int tp) {
  const double token_bytes = static_cast<double>(arch.hidden_size) * models::dtype_bytes(arch.dtype);
  const auto G = static_cast<std::size_t>(ep);
  std::vector<double> cost(G * G, 0.0);
  for (int a = 0; a < ep; ++a)
    for (int b = 0; b < ep; ++b)
      if (a != b)
        cost[static_cast<std::size_t>(a) * G + static_cast<std::size_t>(b)] =
            token_bytes / (tp * cluster.bandwidth_between(a * tp, b * tp));
  return cost;
}

Stage2Problem stage2_problem(const RoutingCounts& routing, const std::vector<std::vector<int>>& clusters,
                             const models::Architecture& arch, const models::Cluster& cluster, int ep, int tp) {
  // One cluster per expert is the replicated problem with a single copy of each (the same sums).
  std::vector<std::vector<std::vector<int>>> holders(clusters.size());
  for (std::size_t l = 0; l < clusters.size(); ++l)
    for (int c : clusters[l]) holders[l].push_back({c});
  return stage2_problem_replicated(routing, holders, arch, cluster, ep, tp);
}

std::vector<double> cross_layer_rank_traffic(const Placement& placement, const RoutingCounts& routing, std::size_t l) {
  const auto G = static_cast<std::size_t>(placement.ep);
  const auto E = static_cast<std::size_t>(routing.num_experts);
  std::vector<double> ranks(G * G, 0.0);
  for (std::size_t a = 0; a < E; ++a)
    for (std::size_t b = 0; b < E; ++b) {
      const double v = routing.next[l][a * E + b];
      if (v == 0.0) continue;
      const auto& ha = placement.ranks[l][a];
      const auto& hb = placement.ranks[l + 1][b];
      const double share = v / static_cast<double>(ha.size() * hb.size());
      for (int ra : ha)
        for (int rb : hb) ranks[static_cast<std::size_t>(ra) * G + static_cast<std::size_t>(rb)] += share;
    }
  return ranks;
}

double placement_traffic_objective(const Placement& placement, const RoutingCounts& routing,
                                   const models::Architecture& arch, const models::Cluster& cluster) {
  const std::vector<double> cost = rank_token_cost(arch, cluster, placement.ep, placement.tp);
  double total = 0.0;
  for (std::size_t l = 0; l + 1 < placement.ranks.size() && l < routing.next.size(); ++l) {
    const std::vector<double> ranks = cross_layer_rank_traffic(placement, routing, l);
    double worst = 0.0;
    for (std::size_t i = 0; i < ranks.size(); ++i) worst = std::max(worst, ranks[i] * cost[i]);
    total += worst;
  }
  return total;
}

void register_solver_placements(PlacementRegistry& registry) {
  registry.add("random", "a seeded random layout with balanced expert counts (--seed)",
               [] { return std::make_unique<RandomPolicy>(); });
  registry.add("greedy",
               "per layer, longest-processing-time first on profiled loads, at most ceil(E/EP) experts per rank",
               [] { return std::make_unique<GreedyPolicy>(); });
  registry.add("eplb",
               "DeepSeek's expert-parallel load balancer: --replicas redundant slots per layer, hierarchical "
               "packing when nodes divide --groups, else global",
               [] { return std::make_unique<EplbPolicy>(); });
  registry.add("moetuner",
               "MoETuner's two-stage ILP on GLPK: per-layer token balance, then a topology-aware cluster-to-rank "
               "mapping that minimises cross-layer traffic time with experts per rank balanced",
               [] { return detail::make_moetuner_policy(detail::MoetunerMode::plain); });
  registry.add("moetuner_equal",
               "moetuner with every cluster holding floor or ceil of E/EP experts: in memory-bound decode a rank's "
               "expert time follows its expert count as much as its tokens",
               [] { return detail::make_moetuner_policy(detail::MoetunerMode::equal_sizes); });
  registry.add("moetuner_replicated",
               "moetuner with --replicas redundant copies: stage 1 splits a replicated expert's load over its "
               "copies (one per rank) and packs them, slots per rank differing by at most one; stage 2 as moetuner",
               [] { return detail::make_moetuner_policy(detail::MoetunerMode::replicated); });
}

}  // namespace moesim::sim
