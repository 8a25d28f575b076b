// Routing statistics of a trace, computed in one streaming pass: memory holds one block plus the
// per-layer accumulators (E loads per layer, E x E co-occurrence counts per adjacent layer pair),
// never the trace. Definitions (all over tokens; "layer" is a decoder-layer index from the trace's
// MoE layer list, and adjacent layers are adjacent entries of that list):
//   load(l, e)      number of tokens with e in their top-k at l; share = load / (tokens * top_k)
//   max/mean        max_e load / mean_e load
//   entropy         -sum share log2 share, in bits; normalised: divided by log2(E)
//   lift(e1, e2)    P(e1 at l and e2 at l+1) / (P(e1 at l) P(e2 at l+1)), given only for pairs seen
//                   together at least min_together times
//   drift           total-variation distance between the share vectors of the first and second
//                   half of the tokens (first half: token index < tokens / 2)
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "traces/trace.hpp"

namespace moesim::traces {

struct StatsOptions {
  std::uint64_t min_together = 50;  // pairs seen together fewer times get no lift
  std::size_t top_pairs = 20;       // how many of the strongest pairs overall to report
};

struct LayerStats {
  int layer = 0;                     // decoder-layer index
  std::uint64_t tokens = 0;
  std::vector<std::uint64_t> loads;  // per expert: top-k assignments
  double max_mean = 0.0;
  double entropy_bits = 0.0;
  double entropy_normalized = 0.0;   // entropy / log2(E); 1 = perfectly even
  int hottest_expert = 0;
  double hottest_share = 0.0;        // share of the layer's assignments
  double drift_tv = 0.0;             // first half vs second half, in [0, 1]
};

// One layer's load figures from its per-expert loads (top-k assignments; `total` of them, > 0): the
// hottest expert and its share, max/mean and the entropy. Shared by routing and load-only statistics.
struct LoadFigures {
  int hottest_expert = 0;
  double hottest_share = 0.0, max_mean = 0.0, entropy_bits = 0.0, entropy_normalized = 0.0;
};
LoadFigures load_figures(const std::vector<std::uint64_t>& loads, double total);
// Sets a layer's figures (LayerStats, LoadLayerStats) from its loads.
template <typename Layer>
void set_load_figures(Layer& layer, double total) {
  const LoadFigures f = load_figures(layer.loads, total);
  layer.hottest_expert = f.hottest_expert;
  layer.max_mean = f.max_mean;
  layer.entropy_bits = f.entropy_bits;
  layer.entropy_normalized = f.entropy_normalized;
  layer.hottest_share = f.hottest_share;
}
// Total variation distance, in [0, 1], between the shares of a first part (`first[e]` of
// `first_total` assignments) and of the rest (`loads[e] - first[e]` of `second_total`).
double drift_tv(const std::uint64_t* first, const std::vector<std::uint64_t>& loads, double first_total,
                double second_total);

struct PairLift {
  std::size_t pair_index = 0;  // layer pair: MoE layer pair_index -> pair_index + 1 (list positions)
  int from_layer = 0;          // decoder-layer indices
  int to_layer = 0;
  int expert_from = 0;
  int expert_to = 0;
  std::uint64_t together = 0;  // tokens with expert_from at from_layer and expert_to at to_layer
  double lift = 0.0;
};

struct LayerPairStats {
  int from_layer = 0;
  int to_layer = 0;
  std::uint64_t qualifying_pairs = 0;  // pairs seen together at least min_together times
  std::optional<PairLift> strongest;   // none when no pair qualifies
};

// A distribution summary over a list of values (count 0: the other fields are 0).
struct Summary {
  std::size_t count = 0;
  double min = 0.0;
  double max = 0.0;
  double mean = 0.0;
  double median = 0.0;
  double p99 = 0.0;  // quantiles interpolate linearly between order statistics
};
Summary summarize(std::vector<double> values);

// Co-occurrence counts of one adjacent layer pair: dense E x E where that fits in memory (every
// model seen so far), a hash map beyond.
class PairCounts {
 public:
  PairCounts(int num_experts, bool dense);
  void add_token(const std::uint16_t* from, const std::uint16_t* to, int top_k);
  std::uint64_t get(int e1, int e2) const;
  template <typename F>
  void for_each_nonzero(F&& f) const {  // f(e1, e2, count)
    const auto n = static_cast<std::size_t>(num_experts_);
    if (!dense_.empty()) {
      for (std::size_t i = 0; i < dense_.size(); ++i)
        if (dense_[i] != 0) f(static_cast<int>(i / n), static_cast<int>(i % n), dense_[i]);
    } else {
      for (const auto& [key, count] : sparse_) f(static_cast<int>(key / n), static_cast<int>(key % n), count);
    }
  }

 private:
  int num_experts_;
  std::vector<std::uint64_t> dense_;
  std::unordered_map<std::uint32_t, std::uint64_t> sparse_;
};

struct TraceStats {
  TraceMeta meta;
  StatsOptions options;
  std::uint64_t tokens = 0;
  std::uint64_t first_half_tokens = 0;
  std::vector<LayerStats> layers;
  std::vector<LayerPairStats> layer_pairs;  // layers.size() - 1 entries
  std::vector<PairLift> top_pairs;          // the strongest qualifying pairs overall, strongest first
  Summary max_mean;                         // over layers
  Summary strongest_lift;                   // over layer pairs: each pair's strongest lift
  Summary pair_lift;                        // over every qualifying pair of every layer pair
  double drift_tv_max = 0.0;
  int drift_tv_max_layer = 0;
  std::vector<PairCounts> together;         // per layer pair, for lookups

  // Lift of any expert pair of layer pair `pair_index`, whatever its count (nullopt when either
  // expert was never chosen).
  std::optional<double> lift(std::size_t pair_index, int expert_from, int expert_to) const;
  std::uint64_t together_count(std::size_t pair_index, int expert_from, int expert_to) const;
};

// Feeds on blocks; finish() computes the statistics. meta.token_count must be the number of tokens
// that will be added (it places the halves); finish() throws InputError when it was not.
class StatsAccumulator {
 public:
  StatsAccumulator(const TraceMeta& meta, const StatsOptions& options);
  void add(const TokenBlock& block);
  TraceStats finish();  // once

 private:
  TraceMeta meta_;
  StatsOptions options_;
  std::size_t layers_;
  int experts_;
  int top_k_;
  std::uint64_t seen_ = 0;
  std::uint64_t half_;
  std::vector<std::uint64_t> loads_;       // [layer][expert]
  std::vector<std::uint64_t> first_half_;  // [layer][expert]
  std::vector<PairCounts> together_;
};

// Streams the whole reader (from its current position; rewind() first to start over).
TraceStats compute_stats(TraceReader& reader, const StatsOptions& options = {});

// A TraceWriter that computes statistics instead of storing tokens: lets a generator's output be
// measured without writing it anywhere. stats() after finish().
class StatsWriter : public TraceWriter {
 public:
  StatsWriter(const TraceMeta& meta, const StatsOptions& options = {}) : accumulator_(meta, options) {}
  void write(const TokenBlock& block) override { accumulator_.add(block); }
  void finish() override { stats_ = accumulator_.finish(); }
  const TraceStats& stats() const { return stats_; }

 private:
  StatsAccumulator accumulator_;
  TraceStats stats_;
};

}  // namespace moesim::traces
