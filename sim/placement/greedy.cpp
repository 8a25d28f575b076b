#include "sim/placement/greedy.hpp"

#include <algorithm>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>

#include "sim/placement/builtin_policies.hpp"

namespace moesim::sim {

namespace {

class GreedyPolicy final : public PlacementPolicy {
 public:
  std::string name() const override { return "greedy"; }
  bool needs_routing() const override { return true; }
  Placement place(const PlacementInput& input) const override {
    Placement p = detail::placement_skeleton(input, name(), true);
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

void register_greedy_placement(PlacementRegistry& registry) {
  registry.add("greedy",
               "per layer, longest-processing-time first on profiled loads, at most ceil(E/EP) experts per rank",
               [] { return std::make_unique<GreedyPolicy>(); });
}

}  // namespace moesim::sim
