// Load statistics of a load-only trace (per-step expert counts, no per-token routes), computed in one
// streaming pass: memory holds one iteration plus E loads per layer. The same per-layer figures the
// routing statistics give where they are defined by loads alone (traces/stats.hpp: loads, max/mean,
// entropy, hottest expert, drift between halves, here halves of the iterations), plus the per-step
// imbalance: max/mean of each iteration's loads at a layer. A load-only trace has no cross-layer
// affinity: no co-occurrence, lift or pair figures.
#pragma once

#include <cstdint>
#include <vector>

#include "traces/load_trace.hpp"
#include "traces/stats.hpp"

namespace moesim::traces {

struct LoadLayerStats {
  int layer = 0;                      // decoder-layer index
  std::vector<std::uint64_t> loads;   // per expert: tokens over all iterations
  double max_mean = 0.0;              // of the summed loads
  double entropy_bits = 0.0;
  double entropy_normalized = 0.0;    // entropy / log2(E); 1 = perfectly even
  int hottest_expert = 0;
  double hottest_share = 0.0;         // share of the layer's assignments
  double step_max_mean_mean = 0.0;    // max/mean of each iteration's loads, averaged over iterations
  double step_max_mean_max = 0.0;     // ... its largest value
  double drift_tv = 0.0;              // first half of the iterations vs the second, in [0, 1]
};

struct LoadTraceStats {
  LoadTraceMeta meta;
  std::uint64_t iterations = 0;
  std::uint64_t tokens = 0;
  std::uint64_t first_half_iterations = 0;  // iteration index < iterations / 2
  Summary tokens_per_iteration;
  std::vector<LoadLayerStats> layers;
  Summary max_mean;       // over layers, of the summed loads
  Summary step_max_mean;  // over every (iteration, layer): the imbalance a step sees
  double drift_tv_max = 0.0;
  int drift_tv_max_layer = 0;
};

// Rewinds the reader first and reads it whole.
LoadTraceStats compute_load_stats(LoadTraceReader& reader);

}  // namespace moesim::traces
