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
// Percentiles by linear interpolation between order statistics (numpy's default). Throws
// std::invalid_argument on an empty sample or a non-finite value.
Summary summarize(const std::vector<double>& samples);
double percentile(std::vector<double> samples, double q);  // q in [0, 1]

// nccl-tests (src/*.cu GetBw): algbw = size / time, with `size` as nccl-tests prints it (all-reduce
// the buffer, all-gather the gathered output, reduce-scatter the input, all-to-all the send buffer,
// send/recv the message); busbw = algbw * factor: 2(n-1)/n all-reduce, (n-1)/n all-gather,
// reduce-scatter and all-to-all, 1 send/recv. Throws std::invalid_argument for ranks < 1.
double bus_factor(models::CollectiveOp op, int ranks);
double algbw(double bytes, double seconds);
double busbw(models::CollectiveOp op, int ranks, double bytes, double seconds);
// Elements per rank nccl-tests passes as `count` for a size of `bytes` (all-gather / reduce-scatter:
// the per-rank chunk; all-to-all: the whole send buffer, rounded down to a multiple of ranks).
long collective_count(models::CollectiveOp op, int ranks, double bytes, int type_size);

// Fraction of [a0, a1] covered by [b0, b1] (0 when disjoint or a is empty).
double interval_overlap(double a0, double a1, double b0, double b1);

}  // namespace moesim::calibrate
