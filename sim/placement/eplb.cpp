#include "sim/placement/eplb.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <utility>

#include "common/error.hpp"
#include "sim/placement/builtin_policies.hpp"

namespace moesim::sim {

namespace {

using common::InputError;

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

// The sizes of one rebalance, checked; groups and nodes are 1 when the packing is global.
struct EplbShape {
  int experts = 0, slots = 0, groups = 0, nodes = 0, gpus = 0;
  bool hierarchical = false;
  int group_size = 0, groups_per_node = 0, per_gpu = 0, node_experts = 0, node_slots = 0;
};

void require(bool ok, const std::string& what) {
  if (!ok) throw InputError("eplb: " + what);
}

EplbShape eplb_shape(int experts, int slots, int groups, int nodes, int gpus) {
  require(experts > 0 && slots >= experts, "expected at least one slot per expert, got " + std::to_string(slots) +
                                               " slots for " + std::to_string(experts) + " experts");
  require(gpus > 0 && slots % gpus == 0,
          std::to_string(slots) + " slots do not divide over " + std::to_string(gpus) + " GPUs");
  require(groups > 0 && experts % groups == 0,
          std::to_string(groups) + " groups do not divide " + std::to_string(experts) + " experts (use --groups 1)");
  require(nodes > 0 && gpus % nodes == 0,
          std::to_string(gpus) + " GPUs do not divide over " + std::to_string(nodes) + " nodes");
  EplbShape s;
  s.experts = experts;
  s.slots = slots;
  s.gpus = gpus;
  s.hierarchical = groups % nodes == 0;
  if (!s.hierarchical) groups = nodes = 1;
  s.groups = groups;
  s.nodes = nodes;
  s.group_size = experts / groups;
  s.groups_per_node = groups / nodes;
  s.per_gpu = slots / gpus;
  s.node_experts = experts / nodes;
  s.node_slots = slots / nodes;
  require(s.node_slots >= s.node_experts, "fewer slots than experts on a node");
  return s;
}

// Step 1: expert groups to nodes. Returns mlog2log: the logical expert of each node-major position.
std::vector<int> groups_to_nodes(const std::vector<double>& row, const EplbShape& s) {
  std::vector<double> group_load(static_cast<std::size_t>(s.groups), 0.0);
  for (int e = 0; e < s.experts; ++e)
    group_load[static_cast<std::size_t>(e / s.group_size)] += row[static_cast<std::size_t>(e)];
  std::vector<int> gpack, grank;
  balanced_packing(group_load, s.nodes, gpack, grank);
  std::vector<int> log2mlog(static_cast<std::size_t>(s.experts)), mlog2log(static_cast<std::size_t>(s.experts));
  for (int e = 0; e < s.experts; ++e) {
    const auto g = static_cast<std::size_t>(e / s.group_size);
    log2mlog[static_cast<std::size_t>(e)] = (gpack[g] * s.groups_per_node + grank[g]) * s.group_size + e % s.group_size;
  }
  for (int e = 0; e < s.experts; ++e) mlog2log[static_cast<std::size_t>(log2mlog[static_cast<std::size_t>(e)])] = e;
  return mlog2log;
}

// Steps 2 and 3 on node n: replicas inside the node, then physical experts to the node's GPUs.
void fill_node(const std::vector<double>& row, const EplbShape& s, const std::vector<int>& mlog2log, int n,
               std::vector<int>& layer_phy2log, std::vector<int>& counts) {
  std::vector<double> mlog_load(static_cast<std::size_t>(s.node_experts));
  for (int i = 0; i < s.node_experts; ++i)
    mlog_load[static_cast<std::size_t>(i)] =
        row[static_cast<std::size_t>(mlog2log[static_cast<std::size_t>(n * s.node_experts + i)])];
  std::vector<int> phy2mlog, phy_rank, mlog_count;
  replicate_experts(mlog_load, s.node_slots, phy2mlog, phy_rank, mlog_count);
  std::vector<double> phy_load(static_cast<std::size_t>(s.node_slots));
  for (int slot = 0; slot < s.node_slots; ++slot) {
    const auto m = static_cast<std::size_t>(phy2mlog[static_cast<std::size_t>(slot)]);
    phy_load[static_cast<std::size_t>(slot)] = mlog_load[m] / mlog_count[m];
  }
  std::vector<int> pack, rank;
  balanced_packing(phy_load, s.gpus / s.nodes, pack, rank);
  for (int slot = 0; slot < s.node_slots; ++slot) {
    const int pphy = pack[static_cast<std::size_t>(slot)] * s.per_gpu + rank[static_cast<std::size_t>(slot)];
    const int mlog = phy2mlog[static_cast<std::size_t>(slot)] + n * s.node_experts;
    layer_phy2log[static_cast<std::size_t>(n * s.node_slots + pphy)] = mlog2log[static_cast<std::size_t>(mlog)];
  }
  for (int i = 0; i < s.node_experts; ++i)
    counts[static_cast<std::size_t>(mlog2log[static_cast<std::size_t>(n * s.node_experts + i)])] =
        mlog_count[static_cast<std::size_t>(i)];
}

// The placement's holders from an EPLB map (slot s on rank s / per_rank), each sorted. EPLB may pack
// two replicas of one expert on one GPU; the placement keeps one copy. Returns the copies dropped.
int holders_from_map(const EplbMap& map, int per_rank, Placement& p) {
  int collapsed = 0;
  for (std::size_t l = 0; l < p.ranks.size(); ++l)
    for (std::size_t s = 0; s < map.phy2log[l].size(); ++s) {
      auto& holders = p.ranks[l][static_cast<std::size_t>(map.phy2log[l][s])];
      const int rank = static_cast<int>(s) / per_rank;
      if (std::find(holders.begin(), holders.end(), rank) != holders.end()) {
        ++collapsed;
        continue;
      }
      holders.push_back(rank);
    }
  for (auto& layer : p.ranks)
    for (auto& holders : layer) std::sort(holders.begin(), holders.end());
  return collapsed;
}

class EplbPolicy final : public PlacementPolicy {
 public:
  std::string name() const override { return "eplb"; }
  bool needs_routing() const override { return true; }
  Placement place(const PlacementInput& input) const override {
    Placement p = detail::placement_skeleton(input, name(), true);
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
    const int collapsed = holders_from_map(map, per_rank, p);
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

}  // namespace

EplbMap eplb_rebalance(const std::vector<std::vector<double>>& weight, int slots, int groups, int nodes, int gpus) {
  if (weight.empty()) throw InputError("eplb: no layers to balance");
  const EplbShape s = eplb_shape(static_cast<int>(weight[0].size()), slots, groups, nodes, gpus);
  EplbMap out;
  out.hierarchical = s.hierarchical;
  for (const auto& row : weight) {
    require(static_cast<int>(row.size()) == s.experts, "layers with different expert counts");
    const std::vector<int> mlog2log = groups_to_nodes(row, s);
    std::vector<int> layer_phy2log(static_cast<std::size_t>(s.slots));
    std::vector<int> counts(static_cast<std::size_t>(s.experts), 0);
    for (int n = 0; n < s.nodes; ++n) fill_node(row, s, mlog2log, n, layer_phy2log, counts);
    out.phy2log.push_back(std::move(layer_phy2log));
    out.replica_count.push_back(std::move(counts));
  }
  return out;
}

void register_eplb_placement(PlacementRegistry& registry) {
  registry.add("eplb",
               "DeepSeek's expert-parallel load balancer: --replicas redundant slots per layer, hierarchical "
               "packing when nodes divide --groups, else global",
               [] { return std::make_unique<EplbPolicy>(); });
}

}  // namespace moesim::sim
