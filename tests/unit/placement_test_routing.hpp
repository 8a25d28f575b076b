// Routing counts for placement tests: Mixtral's shape (8 experts, top-2) with skewed per-layer loads
// and adjacent-layer pair counts drawn from the test's own generator (any type with skewed(range)).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "models/architecture.hpp"
#include "sim/placement/routing_counts.hpp"

namespace moesim::testing {

// A fixed-seed generator of integer loads with a few hot values: floor(1 + range u^3).
struct SkewedRng {
  std::uint64_t s;
  SkewedRng(std::uint64_t seed, std::uint64_t offset) : s(seed * 0x9e3779b97f4a7c15ULL + offset) {}
  std::uint64_t next() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return s >> 33;
  }
  double skewed(int range) {
    const double u = static_cast<double>(next() % 1000) / 1000.0;
    return std::floor(1.0 + range * u * u * u);
  }
};

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
