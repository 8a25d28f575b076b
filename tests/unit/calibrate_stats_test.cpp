// moesim-calibrate statistics and nccl-tests' bandwidth formulas.
#include <doctest/doctest.h>

#include <limits>
#include <stdexcept>

#include "calibrate/stats.hpp"
#include "models/costs.hpp"

namespace mc = moesim::calibrate;
using moesim::models::CollectiveOp;

TEST_CASE("calibrate: summaries give the median, p10/p90 by linear interpolation and the CV") {
  const mc::Summary s = mc::summarize({10, 1, 9, 2, 8, 3, 7, 4, 6, 5});
  CHECK(s.count == 10);
  CHECK(s.median == doctest::Approx(5.5));
  CHECK(s.p10 == doctest::Approx(1.9));  // numpy.percentile(1..10, 10)
  CHECK(s.p90 == doctest::Approx(9.1));
  CHECK(s.min == 1.0);
  CHECK(s.max == 10.0);
  CHECK(s.cv == doctest::Approx(3.0276503540974917 / 5.5));
  CHECK(mc::summarize({2.0}).cv == 0.0);
  CHECK(mc::summarize({2.0}).median == 2.0);
  CHECK_THROWS_AS(mc::summarize({}), std::invalid_argument);
  CHECK_THROWS_AS(mc::summarize({1.0, std::numeric_limits<double>::quiet_NaN()}), std::invalid_argument);
}

TEST_CASE("calibrate: bus bandwidth factors are nccl-tests' (src/*.cu GetBw)") {
  CHECK(moesim::models::busbw_factor(CollectiveOp::kAllReduce, 8) == doctest::Approx(1.75));
  CHECK(moesim::models::busbw_factor(CollectiveOp::kAllReduce, 2) == doctest::Approx(1.0));
  CHECK(moesim::models::busbw_factor(CollectiveOp::kAllGather, 8) == doctest::Approx(0.875));
  CHECK(moesim::models::busbw_factor(CollectiveOp::kReduceScatter, 4) == doctest::Approx(0.75));
  CHECK(moesim::models::busbw_factor(CollectiveOp::kAllToAll, 8) == doctest::Approx(0.875));
  CHECK(moesim::models::busbw_factor(CollectiveOp::kSendRecv, 2) == 1.0);
  CHECK_THROWS_AS(moesim::models::busbw_factor(CollectiveOp::kAllReduce, 0), std::invalid_argument);
  // A row as nccl-tests prints it: 8 GiB all-reduce over 8 GPUs in 36520 us: algbw 235.21, busbw 411.62 GB/s.
  CHECK(mc::algbw(8589934592.0, 36520e-6) / 1e9 == doctest::Approx(235.21).epsilon(1e-4));
  CHECK(mc::busbw(CollectiveOp::kAllReduce, 8, 8589934592.0, 36520e-6) / 1e9 == doctest::Approx(411.62).epsilon(1e-4));
}

TEST_CASE("calibrate: element counts follow nccl-tests' size conventions") {
  CHECK(moesim::models::nccl_tests_count(CollectiveOp::kAllReduce, 8, 1048576.0, 4) == 262144);
  CHECK(moesim::models::nccl_tests_count(CollectiveOp::kAllGather, 8, 1048576.0, 4) == 32768);      // per-rank chunk
  CHECK(moesim::models::nccl_tests_count(CollectiveOp::kReduceScatter, 8, 1048576.0, 4) == 32768);  // per-rank output
  CHECK(moesim::models::nccl_tests_count(CollectiveOp::kAllToAll, 3, 1000.0 * 4, 4) == 999);        // a multiple of the ranks
  CHECK_THROWS_AS(moesim::models::nccl_tests_count(CollectiveOp::kAllReduce, 0, 1024.0, 4), std::invalid_argument);
}

TEST_CASE("calibrate: interval overlap measures how much of one run the other covered") {
  CHECK(mc::interval_overlap(0, 10, 0, 10) == 1.0);
  CHECK(mc::interval_overlap(0, 10, 5, 20) == doctest::Approx(0.5));
  CHECK(mc::interval_overlap(0, 10, 11, 20) == 0.0);
  CHECK(mc::interval_overlap(2, 4, 0, 100) == 1.0);
  CHECK(mc::interval_overlap(3, 3, 0, 10) == 0.0);
}
