#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/stats.hpp"

using moesim::common::percentile;
using moesim::common::percentile_sorted;

TEST_CASE("stats: percentile interpolates between order statistics as numpy.percentile does") {
  const std::vector<double> ten{10, 9, 8, 7, 6, 5, 4, 3, 2, 1};  // unsorted on purpose
  CHECK(percentile(ten, 0.1) == doctest::Approx(1.9));    // numpy.percentile(range(1, 11), 10)
  CHECK(percentile(ten, 0.5) == doctest::Approx(5.5));
  CHECK(percentile(ten, 0.99) == doctest::Approx(9.91));
  CHECK(percentile(ten, 0.0) == 1.0);
  CHECK(percentile(ten, 1.0) == 10.0);
  CHECK(percentile({4.0}, 0.99) == 4.0);
}

TEST_CASE("stats: an empty sample has no percentile (NaN), and the sorted form agrees with the copy form") {
  CHECK(std::isnan(percentile({}, 0.5)));
  CHECK(std::isnan(percentile_sorted({}, 0.5)));
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-5, 5);
  for (std::size_t n = 1; n < 40; ++n) {
    std::vector<double> v(n);
    for (double& x : v) x = u(rng);
    std::vector<double> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    for (double q : {0.0, 0.1, 0.5, 0.9, 0.99, 1.0}) {
      CAPTURE(n);
      CAPTURE(q);
      const double p = percentile(v, q);
      CHECK(p == percentile_sorted(sorted, q));
      CHECK(p >= sorted.front());
      CHECK(p <= sorted.back());
    }
  }
}
