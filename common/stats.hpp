// Percentiles, the one definition every part of the project uses (latency tails, calibration
// medians, trace statistics): linear interpolation between order statistics, numpy.percentile's
// default ("linear"): the q-quantile of n sorted values lies at position q * (n - 1). An empty sample
// has no percentile: NaN, which the tables print as "n/a"; callers that need a number check first.
#pragma once

#include <span>
#include <vector>

namespace moesim::common {

double percentile(std::vector<double> sample, double q);         // q in [0, 1]; sorts a copy
double percentile_sorted(std::span<const double> sorted, double q);  // `sorted` ascending

}  // namespace moesim::common
