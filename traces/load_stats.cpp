#include "traces/load_stats.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"

namespace moesim::traces {

LoadTraceStats compute_load_stats(LoadTraceReader& reader) {
  const LoadTraceMeta& meta = reader.meta();
  const TraceShape& shape = meta.shape;
  const std::size_t layers = shape.layers.size();
  const auto experts = static_cast<std::size_t>(shape.num_experts);
  const double k = shape.top_k;
  LoadTraceStats s;
  s.meta = meta;
  s.first_half_iterations = meta.iterations / 2;
  std::vector<std::uint64_t> loads(layers * experts, 0), first_half(layers * experts, 0);
  std::vector<double> step_sum(layers, 0.0), step_max(layers, 0.0), per_iteration, step_all;
  std::uint64_t first_half_tokens = 0;
  std::vector<std::uint32_t> counts;
  reader.rewind();
  while (reader.next(counts)) {
    const std::uint64_t tokens = load_tokens(shape, counts);
    const bool first = s.iterations < s.first_half_iterations;
    for (std::size_t l = 0; l < layers; ++l) {
      std::uint32_t top = 0;
      for (std::size_t e = 0; e < experts; ++e) {
        const std::uint32_t c = counts[l * experts + e];
        loads[l * experts + e] += c;
        if (first) first_half[l * experts + e] += c;
        top = std::max(top, c);
      }
      // The mean load of a step is tokens x k / E; the step's max/mean is what its slowest expert sees.
      const double mm = static_cast<double>(top) / (static_cast<double>(tokens) * k / static_cast<double>(experts));
      step_sum[l] += mm;
      step_max[l] = std::max(step_max[l], mm);
      step_all.push_back(mm);
    }
    if (first) first_half_tokens += tokens;
    per_iteration.push_back(static_cast<double>(tokens));
    s.tokens += tokens;
    ++s.iterations;
  }
  if (s.iterations != meta.iterations)
    throw common::InputError("load statistics: the trace declares " + std::to_string(meta.iterations) +
                             " iterations but holds " + std::to_string(s.iterations));
  s.tokens_per_iteration = summarize(std::move(per_iteration));
  s.step_max_mean = summarize(std::move(step_all));
  const double total = static_cast<double>(s.tokens) * k;
  const double first_total = static_cast<double>(first_half_tokens) * k;
  const double second_total = total - first_total;
  std::vector<double> max_means;
  for (std::size_t l = 0; l < layers; ++l) {
    LoadLayerStats ls;
    ls.layer = shape.layers[l];
    ls.loads.assign(loads.begin() + static_cast<std::ptrdiff_t>(l * experts),
                    loads.begin() + static_cast<std::ptrdiff_t>((l + 1) * experts));
    set_load_figures(ls, total);
    ls.step_max_mean_mean = step_sum[l] / static_cast<double>(s.iterations);
    ls.step_max_mean_max = step_max[l];
    if (first_total > 0.0 && second_total > 0.0)
      ls.drift_tv = drift_tv(first_half.data() + l * experts, ls.loads, first_total, second_total);
    if (l == 0 || ls.drift_tv > s.drift_tv_max) {
      s.drift_tv_max = ls.drift_tv;
      s.drift_tv_max_layer = ls.layer;
    }
    max_means.push_back(ls.max_mean);
    s.layers.push_back(std::move(ls));
  }
  s.max_mean = summarize(std::move(max_means));
  return s;
}

}  // namespace moesim::traces
