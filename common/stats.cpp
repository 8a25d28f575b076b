#include "common/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace moesim::common {

double percentile_sorted(std::span<const double> sorted, double q) {
  if (sorted.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

double percentile(std::vector<double> sample, double q) {
  std::sort(sample.begin(), sample.end());
  return percentile_sorted(sample, q);
}

}  // namespace moesim::common
