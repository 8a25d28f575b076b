// SimGrid's network/latency-factor setting as moesim applies it (sim/engine/latency_factor.hpp):
// parsed in SimGrid's two forms, taken out of SimGrid's arguments, bad values named.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "sim/engine/latency_factor.hpp"
#include "sim/engine/step_graph.hpp"

using moesim::sim::LatencyFactor;

TEST_CASE("latency factor: one factor, ranges by size, and what is not SimGrid's form") {
  const auto one = LatencyFactor::parse("10");
  REQUIRE(one);
  CHECK(one->at(0.0) == 10.0);
  CHECK(one->at(1e9) == 10.0);

  const auto ranges = LatencyFactor::parse("0:1.5;65472:11.6;1e6:3");
  REQUIRE(ranges);
  CHECK(ranges->at(100.0) == 1.5);
  CHECK(ranges->at(65472.0) == 11.6);
  CHECK(ranges->at(5e5) == 11.6);
  CHECK(ranges->at(2e6) == 3.0);
  const auto late = LatencyFactor::parse("1000:2");
  REQUIRE(late);
  CHECK(late->at(999.0) == 1.0);  // below the first range: unchanged
  CHECK(LatencyFactor{}.at(123.0) == 1.0);

  for (const char* bad : {"", "x", "-1", "0:1;0:2", "10:1;5:2", "0:", ":3", "0:-2", "1 2"})
    CHECK_MESSAGE(!LatencyFactor::parse(bad), bad);
}

TEST_CASE("latency factor: taken out of SimGrid's arguments, the last setting winning") {
  std::vector<std::string> args{"moesim", "--cfg=network/model:CM02", "--cfg=network/latency-factor:2",
                                "--cfg=network/TCP-gamma:0", "--cfg=network/latency-factor:0:1;100:4"};
  const LatencyFactor f = LatencyFactor::take_from(args);
  CHECK(args == std::vector<std::string>{"moesim", "--cfg=network/model:CM02", "--cfg=network/TCP-gamma:0"});
  CHECK(f.at(50.0) == 1.0);
  CHECK(f.at(100.0) == 4.0);

  std::vector<std::string> none{"moesim", "--cfg=network/model:CM02"};
  CHECK(LatencyFactor::take_from(none).at(1.0) == 1.0);
  CHECK(none.size() == 2);

  std::vector<std::string> bad{"moesim", "--cfg=network/latency-factor:fast"};
  try {
    LatencyFactor::take_from(bad);
    FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("network/latency-factor:fast: expected a factor >= 0") != std::string::npos);
  }
}

TEST_CASE("latency factor: the callback's factor stretches a route's latency to the one asked for") {
  const auto ten = LatencyFactor::parse("10");
  REQUIRE(ten);
  const LatencyFactor none;
  CHECK(none.callback_factor(1e3, 2e-6, 0.0) == 1.0);            // nothing asked: the route's
  CHECK(none.callback_factor(1e3, 2e-6, 20e-6) == doctest::Approx(10.0));  // 2 us stretched to 20 us
  CHECK(none.callback_factor(1e3, 2e-6, 1e-6) == 1.0);           // never below the route's latency
  CHECK(ten->callback_factor(1e3, 2e-6, 0.0) == 10.0);           // the setting alone
  CHECK(ten->callback_factor(1e3, 2e-6, 5e-6) == 10.0);          // 20 us factored already covers 5 us
  CHECK(ten->callback_factor(1e3, 2e-6, 40e-6) == doctest::Approx(20.0));
  CHECK(none.callback_factor(1e3, 0.0, 40e-6) == 1.0);           // a route without latency cannot stretch
}

TEST_CASE("a transfer that moves no byte still runs when it waits a latency of its own") {
  // At or below a table's smallest size an operation's time is all fixed cost: its transfers carry
  // 0 bytes and wait that cost; they must still take it (the executor and the dump run them).
  moesim::sim::Task x;
  x.kind = moesim::sim::TaskKind::kTransfer;
  x.gpu = 0;
  x.dst = 1;
  CHECK_FALSE(x.runs());  // nothing to move, nothing to wait
  x.latency = 20e-6;
  CHECK(x.runs());
  x.dst = 0;
  CHECK_FALSE(x.runs());  // to itself: never crosses a link
  x.dst = 1;
  x.latency = 0.0;
  x.amount = 1.0;
  CHECK(x.runs());
  moesim::sim::Task c;
  c.kind = moesim::sim::TaskKind::kCompute;
  CHECK_FALSE(c.runs());
  c.amount = 1e-6;
  CHECK(c.runs());
  moesim::sim::Task j;
  j.latency = 1.0;
  CHECK_FALSE(j.runs());  // a join never runs
}
