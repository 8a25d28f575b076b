#include <doctest/doctest.h>

#include "common/units.hpp"

using moesim::common::parse_unit;
using moesim::common::UnitKind;

TEST_CASE("units: bandwidths are bytes per second, bits when the b is lower case") {
  CHECK(*parse_unit("900GBps", UnitKind::kBandwidth) == doctest::Approx(900e9));
  CHECK(*parse_unit("450 GB/s", UnitKind::kBandwidth) == doctest::Approx(450e9));
  CHECK(*parse_unit("400Gbps", UnitKind::kBandwidth) == doctest::Approx(50e9));
  CHECK(*parse_unit("800Gb/s", UnitKind::kBandwidth) == doctest::Approx(100e9));
  CHECK(*parse_unit("1GiBps", UnitKind::kBandwidth) == doctest::Approx(1073741824.0));
  CHECK_FALSE(parse_unit("900", UnitKind::kBandwidth));
  CHECK_FALSE(parse_unit("900GB", UnitKind::kBandwidth));
  CHECK_FALSE(parse_unit("-5GBps", UnitKind::kBandwidth));
}

TEST_CASE("units: times, sizes, powers and frequencies") {
  CHECK(*parse_unit("2us", UnitKind::kTime) == doctest::Approx(2e-6));
  CHECK(*parse_unit("1.5ms", UnitKind::kTime) == doctest::Approx(1.5e-3));
  CHECK(*parse_unit("3e2ns", UnitKind::kTime) == doctest::Approx(3e-7));
  CHECK(*parse_unit("60s", UnitKind::kTime) == doctest::Approx(60.0));
  CHECK(*parse_unit("141GiB", UnitKind::kBytes) == doctest::Approx(141.0 * 1073741824.0));
  CHECK(*parse_unit("80GB", UnitKind::kBytes) == doctest::Approx(80e9));
  CHECK(*parse_unit("700W", UnitKind::kPower) == doctest::Approx(700.0));
  CHECK(*parse_unit("1980MHz", UnitKind::kFrequency) == doctest::Approx(1.98e9));
  CHECK_FALSE(parse_unit("2 parsecs", UnitKind::kTime));
  CHECK_FALSE(parse_unit("2MS", UnitKind::kTime));  // mega-seconds are not milliseconds
  CHECK_FALSE(parse_unit("700", UnitKind::kPower));
  CHECK_FALSE(parse_unit("nanW", UnitKind::kPower));
  CHECK_FALSE(parse_unit("1e400W", UnitKind::kPower));
  CHECK_FALSE(parse_unit("", UnitKind::kTime));
}

TEST_CASE("units: formatting picks a readable unit") {
  CHECK(moesim::common::format_unit(450e9, UnitKind::kBandwidth) == "450 GB/s");
  CHECK(moesim::common::format_unit(2e-6, UnitKind::kTime) == "2 us");
}
