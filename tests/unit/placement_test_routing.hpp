// Routing counts for placement tests: Mixtral's shape (8 experts, top-2) with skewed per-layer loads
// and adjacent-layer pair counts drawn from the test's own generator (any type with skewed(range)).
#pragma once

#include <cstddef>
#include <vector>

#include "models/architecture.hpp"
#include "sim/placement/routing_counts.hpp"

namespace moesim::testing {

template <class Rng>
sim::RoutingCounts skewed_mixtral_routing(const models::Architecture& arch, Rng& rng, int load_range, int pair_range) {
  sim::RoutingCounts routing;
  routing.layers = arch.moe_layers;
  routing.num_experts = 8;
  routing.top_k = 2;
  routing.tokens = 1000;
  for (std::size_t l = 0; l < arch.moe_layers.size(); ++l) {
    std::vector<double> load(8);
    for (auto& v : load) v = rng.skewed(load_range);
    routing.load.push_back(load);
    if (l + 1 < arch.moe_layers.size()) {
      std::vector<double> next(64);
      for (auto& v : next) v = rng.skewed(pair_range);
      routing.next.push_back(next);
    }
  }
  return routing;
}

}  // namespace moesim::testing
