// Statistics of repeated timings (median, p10/p90, coefficient of variation) and nccl-tests'
// bandwidth terms. Times in seconds, sizes in bytes, bandwidths in bytes per second.
#pragma once

#include <vector>

#include "models/collective_op.hpp"

namespace moesim::calibrate {

struct Summary {
  int count = 0;
  double median = 0.0;
  double p10 = 0.0;
  double p90 = 0.0;
  double min = 0.0;
  double max = 0.0;
  double mean = 0.0;
  double cv = 0.0;  // sample standard deviation / mean
};
// Percentiles as common::percentile (numpy's default). Throws std::invalid_argument on an empty
// sample or a non-finite value.
Summary summarize(const std::vector<double>& samples);

// nccl-tests (src/*.cu GetBw): algbw = size / time, with `size` as nccl-tests prints it (all-reduce
// the buffer, all-gather the gathered output, reduce-scatter the input, all-to-all the send buffer,
// send/recv the message); busbw = algbw * models::busbw_factor. Its `count` column is
// models::nccl_tests_count.
double algbw(double bytes, double seconds);
double busbw(models::CollectiveOp op, int ranks, double bytes, double seconds);

// Fraction of [a0, a1] covered by [b0, b1] (0 when disjoint or a is empty).
double interval_overlap(double a0, double a1, double b0, double b1);

}  // namespace moesim::calibrate
