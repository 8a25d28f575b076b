// The placements that need no traffic: contiguous (Megatron's layout), round_robin and random.
#include <cstddef>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "sim/placement/builtin_policies.hpp"
#include "sim/placement/splitmix.hpp"

namespace moesim::sim {

namespace {

using common::InputError;

// contiguous and round_robin check their input in the placement file's words and keep the hash of
// any trace they are given; the other policies go through detail::placement_skeleton. The two are
// kept apart so that messages and files stay as they have been.
Placement start_placement(const PlacementInput& input, const std::string& policy) {
  const std::string where = "placement policy " + policy;
  if (!input.arch.is_moe())
    throw InputError(where + ": architecture " + input.arch.name + " is dense: it has no experts to place");
  if (input.ep < 1) throw InputError(where + ": ep must be at least 1, got " + std::to_string(input.ep));
  check_parallel_shape(input.ep, input.tp, input.cluster, where);
  Placement p;
  p.architecture = detail::config_reference("architectures", input.arch.name, input.arch.source_file);
  p.cluster = detail::config_reference("clusters", input.cluster.name, input.cluster.source_file);
  p.ep = input.ep;
  p.tp = input.tp;
  p.policy = policy;
  p.trace_sha256 = input.routing ? input.routing->trace_sha256 : "";
  p.layers = input.arch.moe_layers;
  p.ranks.assign(p.layers.size(), std::vector<std::vector<int>>(static_cast<std::size_t>(input.arch.num_experts)));
  return p;
}

class ContiguousPolicy final : public PlacementPolicy {
 public:
  std::string name() const override { return "contiguous"; }
  bool needs_routing() const override { return false; }
  Placement place(const PlacementInput& input) const override;
};

class RoundRobinPolicy final : public PlacementPolicy {
 public:
  std::string name() const override { return "round_robin"; }
  bool needs_routing() const override { return false; }
  Placement place(const PlacementInput& input) const override;
};

Placement ContiguousPolicy::place(const PlacementInput& input) const {
  Placement p = start_placement(input, name());
  const int experts = input.arch.num_experts;
  const int base = experts / input.ep;
  const int extra = experts % input.ep;  // the first `extra` ranks hold one expert more
  std::vector<int> rank_of(static_cast<std::size_t>(experts));
  int e = 0;
  for (int r = 0; r < input.ep; ++r)
    for (int i = 0; i < base + (r < extra ? 1 : 0); ++i) rank_of[static_cast<std::size_t>(e++)] = r;
  for (auto& layer : p.ranks)
    for (std::size_t x = 0; x < layer.size(); ++x) layer[x] = {rank_of[x]};
  return p;
}

Placement RoundRobinPolicy::place(const PlacementInput& input) const {
  Placement p = start_placement(input, name());
  for (auto& layer : p.ranks)
    for (std::size_t x = 0; x < layer.size(); ++x) layer[x] = {static_cast<int>(x) % input.ep};
  return p;
}

class RandomPolicy final : public PlacementPolicy {
 public:
  std::string name() const override { return "random"; }
  bool needs_routing() const override { return false; }
  Placement place(const PlacementInput& input) const override {
    Placement p = detail::placement_skeleton(input, name(), false);
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

}  // namespace

void register_baseline_placements(PlacementRegistry& registry) {
  registry.add("contiguous",
               "Megatron's layout: experts 0..E/EP-1 on rank 0, the next E/EP on rank 1, ...; when EP does not "
               "divide E the first E % EP ranks hold one expert more",
               [] { return std::make_unique<ContiguousPolicy>(); });
  registry.add("round_robin", "expert e on rank e % EP", [] { return std::make_unique<RoundRobinPolicy>(); });
  registry.add("random", "a seeded random layout with balanced expert counts (--seed)",
               [] { return std::make_unique<RandomPolicy>(); });
}

}  // namespace moesim::sim
