#include "calibrate/stats.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "common/stats.hpp"
#include "models/costs.hpp"

namespace moesim::calibrate {

Summary summarize(const std::vector<double>& s) {
  if (s.empty()) throw std::invalid_argument("summary of an empty sample");
  for (double v : s)
    if (!std::isfinite(v)) throw std::invalid_argument("summary of a sample with a non-finite value");
  Summary r;
  r.count = static_cast<int>(s.size());
  r.median = common::percentile(s, 0.5);
  r.p10 = common::percentile(s, 0.1);
  r.p90 = common::percentile(s, 0.9);
  r.min = *std::min_element(s.begin(), s.end());
  r.max = *std::max_element(s.begin(), s.end());
  double sum = 0.0;
  for (double v : s) sum += v;
  r.mean = sum / static_cast<double>(s.size());
  if (s.size() > 1 && r.mean != 0.0) {
    double ss = 0.0;
    for (double v : s) ss += (v - r.mean) * (v - r.mean);
    r.cv = std::sqrt(ss / static_cast<double>(s.size() - 1)) / std::abs(r.mean);
  }
  return r;
}

double algbw(double bytes, double seconds) { return seconds > 0.0 ? bytes / seconds : 0.0; }

double busbw(models::CollectiveOp op, int ranks, double bytes, double seconds) {
  return algbw(bytes, seconds) * models::busbw_factor(op, ranks);
}

double interval_overlap(double a0, double a1, double b0, double b1) {
  if (a1 <= a0) return 0.0;
  const double lo = std::max(a0, b0), hi = std::min(a1, b1);
  return hi > lo ? (hi - lo) / (a1 - a0) : 0.0;
}

}  // namespace moesim::calibrate
