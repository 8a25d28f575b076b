#include "traces/stats.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.hpp"
#include "common/stats.hpp"

namespace moesim::traces {

LoadFigures load_figures(const std::vector<std::uint64_t>& loads, double total) {
  LoadFigures f;
  std::uint64_t max_load = 0;
  for (std::size_t e = 0; e < loads.size(); ++e) {
    if (loads[e] > max_load) {
      max_load = loads[e];
      f.hottest_expert = static_cast<int>(e);
    }
    const double p = static_cast<double>(loads[e]) / total;
    if (p > 0.0) f.entropy_bits -= p * std::log2(p);
  }
  const auto experts = static_cast<double>(loads.size());
  f.max_mean = static_cast<double>(max_load) / (total / experts);
  f.entropy_normalized = loads.size() > 1 ? f.entropy_bits / std::log2(experts) : 1.0;
  f.hottest_share = static_cast<double>(max_load) / total;
  return f;
}

double drift_tv(const std::uint64_t* first, const std::vector<std::uint64_t>& loads, double first_total,
                double second_total) {
  double tv = 0.0;
  for (std::size_t e = 0; e < loads.size(); ++e)
    tv += std::fabs(static_cast<double>(first[e]) / first_total -
                    static_cast<double>(loads[e] - first[e]) / second_total);
  return tv / 2.0;
}

namespace {

// Dense co-occurrence matrices up to this many bytes in all; beyond, hash maps (slower, but only for
// shapes with thousands of experts).
constexpr double kDenseBudgetBytes = 512.0 * 1024 * 1024;

bool stronger(const PairLift& a, const PairLift& b) {
  if (a.lift != b.lift) return a.lift > b.lift;
  if (a.pair_index != b.pair_index) return a.pair_index < b.pair_index;
  if (a.expert_from != b.expert_from) return a.expert_from < b.expert_from;
  return a.expert_to < b.expert_to;
}

}  // namespace

Summary summarize(std::vector<double> values) {
  Summary s;
  s.count = values.size();
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.min = values.front();
  s.max = values.back();
  double total = 0.0;
  for (double v : values) total += v;
  s.mean = total / static_cast<double>(values.size());
  s.median = common::percentile_sorted(values, 0.5);
  s.p99 = common::percentile_sorted(values, 0.99);
  return s;
}

PairCounts::PairCounts(int num_experts, bool dense) : num_experts_(num_experts) {
  if (dense) dense_.assign(static_cast<std::size_t>(num_experts) * static_cast<std::size_t>(num_experts), 0);
}

void PairCounts::add_token(const std::uint16_t* from, const std::uint16_t* to, int top_k) {
  const auto n = static_cast<std::size_t>(num_experts_);
  if (!dense_.empty()) {
    for (int i = 0; i < top_k; ++i) {
      std::uint64_t* row = dense_.data() + from[i] * n;
      for (int j = 0; j < top_k; ++j) ++row[to[j]];
    }
  } else {
    for (int i = 0; i < top_k; ++i)
      for (int j = 0; j < top_k; ++j) ++sparse_[static_cast<std::uint32_t>(from[i] * n + to[j])];
  }
}

std::uint64_t PairCounts::get(int e1, int e2) const {
  if (e1 < 0 || e2 < 0 || e1 >= num_experts_ || e2 >= num_experts_) return 0;
  const auto n = static_cast<std::size_t>(num_experts_);
  const std::size_t key = static_cast<std::size_t>(e1) * n + static_cast<std::size_t>(e2);
  if (!dense_.empty()) return dense_[key];
  auto it = sparse_.find(static_cast<std::uint32_t>(key));
  return it == sparse_.end() ? 0 : it->second;
}

std::uint64_t TraceStats::together_count(std::size_t pair_index, int expert_from, int expert_to) const {
  if (pair_index >= together.size()) return 0;
  return together[pair_index].get(expert_from, expert_to);
}

std::optional<double> TraceStats::lift(std::size_t pair_index, int expert_from, int expert_to) const {
  if (pair_index + 1 >= layers.size()) return std::nullopt;
  const auto& from = layers[pair_index].loads;
  const auto& to = layers[pair_index + 1].loads;
  if (expert_from < 0 || expert_to < 0 || static_cast<std::size_t>(expert_from) >= from.size() ||
      static_cast<std::size_t>(expert_to) >= to.size())
    return std::nullopt;
  const auto a = static_cast<double>(from[static_cast<std::size_t>(expert_from)]);
  const auto b = static_cast<double>(to[static_cast<std::size_t>(expert_to)]);
  if (a == 0.0 || b == 0.0) return std::nullopt;
  return static_cast<double>(together_count(pair_index, expert_from, expert_to)) * static_cast<double>(tokens) /
         (a * b);
}

StatsAccumulator::StatsAccumulator(const TraceMeta& meta, const StatsOptions& options)
    : meta_(meta),
      options_(options),
      layers_(meta.shape.layers.size()),
      experts_(meta.shape.num_experts),
      top_k_(meta.shape.top_k),
      half_(meta.token_count / 2) {
  if (layers_ == 0 || experts_ <= 0 || top_k_ <= 0 || top_k_ > experts_)
    throw common::InputError("trace statistics: the trace's shape is empty or inconsistent (" +
                             std::to_string(layers_) + " layers, " + std::to_string(experts_) + " experts, top-" +
                             std::to_string(top_k_) + ")");
  const auto cells = layers_ * static_cast<std::size_t>(experts_);
  loads_.assign(cells, 0);
  first_half_.assign(cells, 0);
  const double dense_bytes = static_cast<double>(layers_ - 1) * experts_ * static_cast<double>(experts_) * 8.0;
  const bool dense = dense_bytes <= kDenseBudgetBytes;
  together_.reserve(layers_ - 1);
  for (std::size_t p = 0; p + 1 < layers_; ++p) together_.emplace_back(experts_, dense);
}

void StatsAccumulator::add(const TokenBlock& block) {
  const std::size_t n = block.size();
  const std::size_t per_token = layers_ * static_cast<std::size_t>(top_k_);
  if (block.experts.size() != n * per_token || block.position.size() != n)
    throw common::InputError("trace statistics: a block of " + std::to_string(n) + " tokens holds " +
                             std::to_string(block.experts.size()) + " expert ids, expected " +
                             std::to_string(n * per_token));
  const auto experts = static_cast<std::size_t>(experts_);
  for (std::size_t t = 0; t < n; ++t) {
    const std::uint16_t* ids = block.experts.data() + t * per_token;
    for (std::size_t i = 0; i < per_token; ++i) {
      if (ids[i] >= experts_)
        throw common::InputError("trace statistics: token " + std::to_string(seen_ + t) + " (sequence " +
                                 std::to_string(block.sequence[t]) + ", position " +
                                 std::to_string(block.position[t]) + "), MoE layer " +
                                 std::to_string(meta_.shape.layers[i / static_cast<std::size_t>(top_k_)]) +
                                 ": expert id " + std::to_string(ids[i]) + " is outside 0.." +
                                 std::to_string(experts_ - 1));
    }
    const bool first = seen_ + t < half_;
    for (std::size_t l = 0; l < layers_; ++l) {
      const std::uint16_t* layer_ids = ids + l * static_cast<std::size_t>(top_k_);
      std::uint64_t* load = loads_.data() + l * experts;
      for (int k = 0; k < top_k_; ++k) ++load[layer_ids[k]];
      if (first) {
        std::uint64_t* half = first_half_.data() + l * experts;
        for (int k = 0; k < top_k_; ++k) ++half[layer_ids[k]];
      }
      if (l + 1 < layers_) together_[l].add_token(layer_ids, layer_ids + top_k_, top_k_);
    }
  }
  seen_ += n;
}

TraceStats StatsAccumulator::finish() {
  if (seen_ != meta_.token_count)
    throw common::InputError("trace statistics: the trace declares " + std::to_string(meta_.token_count) +
                             " tokens but holds " + std::to_string(seen_));
  TraceStats s;
  s.meta = meta_;
  s.options = options_;
  s.tokens = seen_;
  s.first_half_tokens = half_;
  const auto experts = static_cast<std::size_t>(experts_);
  const std::uint64_t second_half_tokens = seen_ - half_;
  std::vector<double> max_means;
  for (std::size_t l = 0; l < layers_; ++l) {
    LayerStats ls;
    ls.layer = meta_.shape.layers[l];
    ls.tokens = seen_;
    ls.loads.assign(loads_.begin() + static_cast<std::ptrdiff_t>(l * experts),
                    loads_.begin() + static_cast<std::ptrdiff_t>((l + 1) * experts));
    const double total = static_cast<double>(seen_) * top_k_;
    if (total > 0.0) {
      set_load_figures(ls, total);
    }
    if (half_ > 0 && second_half_tokens > 0)
      ls.drift_tv = drift_tv(first_half_.data() + l * experts, ls.loads, static_cast<double>(half_) * top_k_,
                             static_cast<double>(second_half_tokens) * top_k_);
    if (l == 0 || ls.drift_tv > s.drift_tv_max) {
      s.drift_tv_max = ls.drift_tv;
      s.drift_tv_max_layer = ls.layer;
    }
    max_means.push_back(ls.max_mean);
    s.layers.push_back(std::move(ls));
  }
  s.max_mean = summarize(max_means);

  std::vector<double> strongest;
  std::vector<double> all_lifts;
  std::vector<PairLift> candidates;  // each layer pair's best top_pairs, merged below
  const double tokens = static_cast<double>(seen_);
  for (std::size_t p = 0; p + 1 < layers_; ++p) {
    LayerPairStats lp;
    lp.from_layer = meta_.shape.layers[p];
    lp.to_layer = meta_.shape.layers[p + 1];
    const auto& from = s.layers[p].loads;
    const auto& to = s.layers[p + 1].loads;
    std::vector<PairLift> pair_lifts;
    together_[p].for_each_nonzero([&](int e1, int e2, std::uint64_t count) {
      if (count < options_.min_together) return;
      PairLift pl;
      pl.pair_index = p;
      pl.from_layer = lp.from_layer;
      pl.to_layer = lp.to_layer;
      pl.expert_from = e1;
      pl.expert_to = e2;
      pl.together = count;
      pl.lift = static_cast<double>(count) * tokens /
                (static_cast<double>(from[static_cast<std::size_t>(e1)]) * static_cast<double>(to[static_cast<std::size_t>(e2)]));
      pair_lifts.push_back(pl);
    });
    lp.qualifying_pairs = pair_lifts.size();
    for (const auto& pl : pair_lifts) all_lifts.push_back(pl.lift);
    const std::size_t keep = std::min(pair_lifts.size(), std::max<std::size_t>(options_.top_pairs, 1));
    std::partial_sort(pair_lifts.begin(), pair_lifts.begin() + static_cast<std::ptrdiff_t>(keep), pair_lifts.end(),
                      stronger);
    if (keep > 0) {
      lp.strongest = pair_lifts.front();
      strongest.push_back(pair_lifts.front().lift);
    }
    candidates.insert(candidates.end(), pair_lifts.begin(), pair_lifts.begin() + static_cast<std::ptrdiff_t>(keep));
    s.layer_pairs.push_back(lp);
  }
  std::sort(candidates.begin(), candidates.end(), stronger);
  if (candidates.size() > options_.top_pairs) candidates.resize(options_.top_pairs);
  s.top_pairs = std::move(candidates);
  s.strongest_lift = summarize(std::move(strongest));
  s.pair_lift = summarize(std::move(all_lifts));
  s.together = std::move(together_);
  together_.clear();
  return s;
}

TraceStats compute_stats(TraceReader& reader, const StatsOptions& options) {
  StatsAccumulator acc(reader.meta(), options);
  TokenBlock block;
  while (reader.next(block)) acc.add(block);
  return acc.finish();
}

}  // namespace moesim::traces
