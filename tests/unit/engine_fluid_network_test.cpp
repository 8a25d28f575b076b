// The engine's fluid network (sim/engine/fluid_network.hpp): max-min sharing on small cases worked
// by hand, latency and capacity changes, and the incremental solver against filling every flow again
// at every change on random networks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <vector>

#include "sim/engine/fluid_network.hpp"

using moesim::sim::FluidNetwork;

namespace {

struct Start {
  double at, latency, bytes;
  std::vector<int> route;
  std::uint64_t token;
};
struct Change {
  double at;
  int link;
  double capacity;
};

// Runs starts and capacity changes in time order and returns each token's completion time.
std::map<std::uint64_t, double> run(FluidNetwork& net, std::vector<Start> starts, std::vector<Change> changes = {}) {
  std::sort(starts.begin(), starts.end(), [](const Start& a, const Start& b) { return a.at < b.at; });
  std::sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) { return a.at < b.at; });
  std::map<std::uint64_t, double> end;
  std::vector<std::uint64_t> done;
  std::size_t s = 0, c = 0;
  double now = 0.0;
  for (int guard = 0; guard < 1000000; ++guard) {
    const double ns = s < starts.size() ? starts[s].at : FluidNetwork::kNever;
    const double nc = c < changes.size() ? changes[c].at : FluidNetwork::kNever;
    const double ne = net.next_event();
    const double t = std::min({ns, nc, ne});
    if (t == FluidNetwork::kNever) break;
    now = std::max(now, t);
    done.clear();
    net.advance(now, done);
    for (auto tok : done) end[tok] = now;
    while (s < starts.size() && starts[s].at <= now) {
      const Start& x = starts[s++];
      net.start(now, x.latency, x.bytes, x.route, x.token);
    }
    while (c < changes.size() && changes[c].at <= now) {
      net.set_capacity(changes[c].link, changes[c].capacity, now);
      ++c;
    }
  }
  return end;
}

}  // namespace

TEST_CASE("fluid network: two flows share a link equally, the survivor takes it all") {
  FluidNetwork net({1e9});
  const auto end = run(net, {{0.0, 0.0, 1e6, {0}, 1}, {0.0, 0.0, 2e6, {0}, 2}});
  CHECK(end.at(1) == doctest::Approx(2e-3).epsilon(1e-12));  // 1 MB at 0.5 GB/s
  CHECK(end.at(2) == doctest::Approx(3e-3).epsilon(1e-12));  // then 1 MB at 1 GB/s
  CHECK(net.in_flight() == 0);
}

TEST_CASE("fluid network: max-min rates (a flow held by one link leaves the rest of another to others)") {
  // f1 on A (1 GB/s), f2 on A and B (2 GB/s), f3 on B: A's share 0.5 binds f1 and f2; f3 gets 1.5.
  FluidNetwork net({1e9, 2e9});
  net.start(0.0, 0.0, 1e9, std::vector<int>{0}, 1);
  net.start(0.0, 0.0, 1e9, std::vector<int>{0, 1}, 2);
  net.start(0.0, 0.0, 1e9, std::vector<int>{1}, 3);
  std::vector<std::uint64_t> done;
  net.advance(0.0, done);
  CHECK(done.empty());
  CHECK(net.rate(1) == doctest::Approx(0.5e9));
  CHECK(net.rate(2) == doctest::Approx(0.5e9));
  CHECK(net.rate(3) == doctest::Approx(1.5e9));
}

TEST_CASE("fluid network: a flow holds no bandwidth during its latency; a zero-byte flow ends with it") {
  FluidNetwork net({1e9});
  const auto end = run(net, {{0.0, 1e-3, 1e6, {0}, 1}, {0.0, 0.0, 2e6, {0}, 2}, {0.0, 5e-4, 0.0, {0}, 3}});
  // Flow 2 alone for 1 ms moves 1 MB; then both share: flow 1's 1 MB and flow 2's last 1 MB end at 3 ms.
  CHECK(end.at(2) == doctest::Approx(3e-3).epsilon(1e-12));
  CHECK(end.at(1) == doctest::Approx(3e-3).epsilon(1e-12));
  CHECK(end.at(3) == doctest::Approx(5e-4).epsilon(1e-12));
}

TEST_CASE("fluid network: a capacity change applies to flows in flight from its instant") {
  FluidNetwork net({1e9, 1e9});
  // 1 ms at 1 GB/s (1 MB), then half speed: the last 1 MB takes 2 ms.
  const auto end = run(net, {{0.0, 0.0, 2e6, {0, 1}, 1}}, {{1e-3, 1, 0.5e9}});
  CHECK(end.at(1) == doctest::Approx(3e-3).epsilon(1e-12));
}

TEST_CASE("fluid network: bad input is refused") {
  CHECK_THROWS_AS(FluidNetwork({0.0}), std::invalid_argument);
  FluidNetwork net({1e9});
  CHECK_THROWS_AS(net.start(0.0, 0.0, 1.0, std::vector<int>{}, 1), std::invalid_argument);
  CHECK_THROWS_AS(net.start(0.0, 0.0, 1.0, std::vector<int>{3}, 1), std::invalid_argument);
  CHECK_THROWS_AS(net.start(0.0, -1.0, 1.0, std::vector<int>{0}, 1), std::invalid_argument);
  CHECK_THROWS_AS(net.set_capacity(0, -1.0, 0.0), std::invalid_argument);
}

namespace {

struct RandomNetwork {
  std::vector<double> caps;
  std::vector<Start> starts;
  std::vector<Change> changes;
};

// Random networks of ports and a few shared links: flows start in bursts (as an all-to-all's do),
// with latencies, sizes over three decades, and port capacities that change mid-flight.
RandomNetwork random_network(unsigned seed, bool capacity_changes = true) {
  RandomNetwork n;
  std::mt19937_64 rng(seed);
  const int ports = 8 + static_cast<int>(seed % 5) * 4;
  for (int p = 0; p < 2 * ports; ++p)
    n.caps.push_back(seed % 2 ? 4e11 : 1e11 + 3e11 * std::uniform_real_distribution<>(0, 1)(rng));
  const int shared = 3;
  for (int k = 0; k < shared; ++k) n.caps.push_back(2e12);
  std::uniform_real_distribution<> u(0.0, 1.0);
  std::uint64_t token = 0;
  for (int burst = 0; burst < 6; ++burst) {
    const double t0 = burst * 2e-5;
    for (int src = 0; src < ports; ++src)
      for (int dst = 0; dst < ports; ++dst) {
        if (src == dst || u(rng) < 0.4) continue;
        std::vector<int> route{src, ports + dst};
        if (u(rng) < 0.3) route.push_back(2 * ports + static_cast<int>(rng() % shared));
        const double bytes = std::pow(10.0, 4.0 + 3.0 * u(rng));
        n.starts.push_back({t0 + (u(rng) < 0.5 ? 0.0 : 1e-6 * u(rng)), 1e-6 * u(rng), bytes, route, ++token});
      }
  }
  for (int k = 0; k < 40; ++k) {
    const Change c{1.5e-4 * u(rng), static_cast<int>(rng() % (2 * ports)), n.caps[0] / (1.0 + u(rng))};
    if (capacity_changes) n.changes.push_back(c);
  }
  return n;
}

}  // namespace

TEST_CASE("fluid network: filling only what a change can move gives every flow the same end as filling all") {
  for (unsigned seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    const RandomNetwork n = random_network(seed);
    FluidNetwork fast(n.caps), full(n.caps, false);
    const auto a = run(fast, n.starts, n.changes), b = run(full, n.starts, n.changes);
    REQUIRE(a.size() == n.starts.size());
    REQUIRE(b.size() == n.starts.size());
    double worst = 0.0;
    for (const auto& [tok, t] : b) worst = std::max(worst, std::abs(a.at(tok) - t) / t);
    CHECK(worst < 1e-9);
    CHECK(fast.flows_filled() < full.flows_filled());
  }
}

TEST_CASE("fluid network: solving in epochs converges to the exact ends as the tolerance shrinks") {
  for (unsigned seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    const RandomNetwork n = random_network(seed);
    FluidNetwork exact(n.caps);
    const auto b = run(exact, n.starts, n.changes);
    double previous = 1.0;
    for (const double t : {0.1, 0.01, 1e-4, 1e-7}) {
      CAPTURE(t);
      FluidNetwork epochs(n.caps);
      epochs.set_tolerance(t);
      const auto a = run(epochs, n.starts, n.changes);
      REQUIRE(a.size() == n.starts.size());
      double sum = 0.0;
      for (const auto& [tok, end] : b) sum += std::abs(a.at(tok) - end) / (end - 0.0);
      const double mean = sum / static_cast<double>(b.size());
      // Each tenfold smaller tolerance takes the ends closer, down to SimGrid's precision.
      CHECK(mean <= previous + 1e-12);
      previous = mean;
      if (t <= 1e-7) CHECK(mean < 1e-5);
    }
  }
}

TEST_CASE("fluid network: epochs of 5% keep the mean end within 5% and the last within 2%") {
  // Bursts of flows without capacity changes: what an all-to-all phase is. Ends are measured from
  // each flow's start.
  for (unsigned seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    const RandomNetwork n = random_network(seed, false);
    FluidNetwork exact(n.caps), epochs(n.caps);
    epochs.set_tolerance(0.05);
    const auto b = run(exact, n.starts), a = run(epochs, n.starts);
    double last_a = 0.0, last_b = 0.0, sum = 0.0;
    for (const Start& s : n.starts) {
      const double tb = b.at(s.token) - s.at, ta = a.at(s.token) - s.at;
      sum += std::abs(ta - tb) / tb;
      last_a = std::max(last_a, a.at(s.token));
      last_b = std::max(last_b, b.at(s.token));
    }
    CHECK(std::abs(last_a / last_b - 1.0) < 0.02);
    CHECK(sum / static_cast<double>(n.starts.size()) < 0.05);
  }
}

TEST_CASE("fluid network: an all-to-all of 32 ports in epochs of 5% solves a fraction as often, its end within 1%") {
  // Every port sends to every other one flow of 1 to 20 tokens of 7 KiB, all at once: a skewed MoE
  // dispatch. Exact max-min solves at almost every completion.
  const int ports = 32;
  std::vector<double> caps(2 * ports, 5e10);
  std::mt19937_64 rng(7);
  std::vector<Start> starts;
  std::uint64_t token = 0;
  for (int src = 0; src < ports; ++src)
    for (int dst = 0; dst < ports; ++dst)
      if (src != dst) starts.push_back({0.0, 2e-6, 7168.0 * static_cast<double>(1 + rng() % 20), {src, ports + dst}, ++token});
  FluidNetwork exact(caps), epochs(caps);
  epochs.set_tolerance(0.05);
  const auto b = run(exact, starts), a = run(epochs, starts);
  double last_a = 0.0, last_b = 0.0, sum = 0.0;
  for (const auto& [tok, end] : b) {
    last_a = std::max(last_a, a.at(tok));
    last_b = std::max(last_b, end);
    sum += std::abs(a.at(tok) - end) / end;
  }
  CHECK(std::abs(last_a / last_b - 1.0) < 0.01);
  CHECK(sum / static_cast<double>(b.size()) < 0.02);
  CHECK(epochs.solves() * 5 < exact.solves());
  CHECK(epochs.flows_filled() * 2 < exact.flows_filled());
}

TEST_CASE("fluid network: a flow that starts between epochs waits at most the tolerance of its moving time") {
  // Forty long flows on one link, then a short one: with nothing else to trigger a solve, its
  // own deadline does. Exactly it shares the link with 40 others: 41 x 1e4 B at 1e9 B/s.
  FluidNetwork net({1e9});
  net.set_tolerance(0.1);
  std::vector<Start> starts;
  for (std::uint64_t i = 0; i < 40; ++i) starts.push_back({0.0, 0.0, 1e9, {0}, i});
  starts.push_back({1e-3, 0.0, 1e4, {0}, 99});
  const auto end = run(net, starts);
  const double alone = 41 * 1e4 / 1e9;  // its moving time at its fair share
  CHECK(end.at(99) - 1e-3 >= alone * (1.0 - 1e-9));
  CHECK(end.at(99) - 1e-3 <= alone * (1.0 + 0.1) * (1.0 + 1e-9));
}

TEST_CASE("fluid network: in epochs, flows that start where there is room move at once, sharing it, without a solve") {
  // A hundred long flows hold link 0 (moving from one instant, one solve). Two flows start
  // together on idle link 1 (one also crossing idle link 2): between epochs they share the room the
  // others leave, as max-min would give them, and end when exact max-min ends them; a flow that
  // starts on full link 0 gets nothing until a solve.
  FluidNetwork net({1e9, 1e9, 1e9});
  net.set_tolerance(0.05);
  std::vector<std::uint64_t> done;
  for (std::uint64_t i = 0; i < 100; ++i) net.start(0.0, 1e-4, 1e9, std::vector<int>{0}, i);
  net.advance(1e-4, done);
  CHECK(net.rate(0) == doctest::Approx(1e9 / 100));
  CHECK(net.rate(99) == doctest::Approx(1e9 / 100));
  const auto solves = net.solves();
  net.start(1e-3, 1e-5, 1e6, std::vector<int>{1}, 100);
  net.start(1e-3, 1e-5, 1e6, std::vector<int>{1, 2}, 101);
  net.advance(1.01e-3, done);
  CHECK(net.rate(100) == doctest::Approx(0.5e9));
  CHECK(net.rate(101) == doctest::Approx(0.5e9));
  CHECK(net.solves() == solves);
  CHECK(net.next_event() == doctest::Approx(3.01e-3));
  net.start(1.5e-3, 1e-5, 1e4, std::vector<int>{0}, 102);
  net.advance(1.51e-3, done);
  CHECK(net.rate(102) == 0.0);
  CHECK(net.solves() == solves);
  net.advance(3.01e-3, done);
  CHECK(std::count(done.begin(), done.end(), 100) == 1);
  CHECK(std::count(done.begin(), done.end(), 101) == 1);
}

TEST_CASE("fluid network: a tolerance below 0 or from 1 on is refused") {
  FluidNetwork net({1e9});
  CHECK_THROWS_AS(net.set_tolerance(-0.1), std::invalid_argument);
  CHECK_THROWS_AS(net.set_tolerance(1.0), std::invalid_argument);
  CHECK_THROWS_AS(net.set_tolerance(std::nan("")), std::invalid_argument);
  net.set_tolerance(0.0);
  CHECK(net.tolerance() == 0.0);
}
