// Online rebalancing (docs/simulator.md, "Online rebalancing"): the placement solved again from a
// window of routing, the moved experts' weights sent as transfers, blocking or in the background, and
// workload phases. Toy setups whose migration can be computed by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "common/stats.hpp"
#include "models/costs.hpp"
#include "sim/engine/rebalance.hpp"
#include "sim/study/results.hpp"
#include "tests/sim/sim_fixtures.hpp"

using namespace moesim;
using namespace moesim::testing;

namespace {

constexpr double kBandwidth = 100e9;
constexpr double kLatency = 1e-6;

// Longest-processing-time placement: experts by load (then id), each onto the least loaded rank (then
// the lowest): deterministic and easy to follow by hand.
sim::Placement balance(const models::Architecture& arch, int ep, const sim::RoutingCounts& c) {
  sim::Placement p = identity_placement(arch, ep);
  for (std::size_t l = 0; l < c.load.size(); ++l) {
    std::vector<int> order(static_cast<std::size_t>(arch.num_experts));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return c.load[l][a] > c.load[l][b]; });
    std::vector<double> rank_load(static_cast<std::size_t>(ep), 0.0);
    for (int e : order) {
      const auto r = static_cast<int>(std::min_element(rank_load.begin(), rank_load.end()) - rank_load.begin());
      rank_load[static_cast<std::size_t>(r)] += c.load[l][static_cast<std::size_t>(e)];
      p.ranks[l][static_cast<std::size_t>(e)] = {r};
    }
  }
  return p;
}

// Two GPUs, 4 experts top-1 (identity placement: experts 0 and 2 on rank 0, 1 and 3 on rank 1);
// prefill of 16,384-token steps, two sequences of 8,192 tokens each (one per home rank), every token
// going to expert 0 or 2 (both on rank 0). A step's dispatch and combine move more than the copies a
// rebalance moves, so that background copies finish inside the step.
struct Toy {
  models::Architecture arch = toy_arch(4, 1);
  models::Cluster cluster = toy_cluster(2, kBandwidth, kLatency);
  models::Profile profile = toy_profile();
  sim::Placement placement = identity_placement(arch, 2);
  sim::Workload workload;
  traces::MemoryTrace trace = toy_trace(arch, 8, 8192, [](int, int t) { return std::vector<int>{t % 2 == 0 ? 0 : 2}; });
  Toy() {
    workload.mode = sim::WorkloadMode::kPrefill;
    workload.tokens_per_step = 16384;
  }
  sim::SimResult run(int every, sim::MigrationMode mode, int first_step = 0, int end_step = -1) const {
    return sim::run_isolated([&] {
      auto reader = traces::read_memory_trace(trace);
      auto source = sim::make_prefill_source(*reader, 2, workload.tokens_per_step);
      sim::EngineInput in;
      in.arch = &arch;
      in.cluster = &cluster;
      in.profile = &profile;
      in.placement = &placement;
      in.ep = 2;
      in.workload = &workload;
      in.steps = source.get();
      in.options.steps = 6;
      in.options.first_step = first_step;
      in.options.end_step = end_step;
      in.options.rebalance.every_steps = every;
      in.options.rebalance.migration = mode;
      in.resolve = [this](const sim::RoutingCounts& c) { return balance(arch, 2, c); };
      return sim::simulate(in);
    });
  }
};

}  // namespace

TEST_CASE("rebalance: an interval longer than the run gives the static placement's results exactly") {
  const Toy toy;
  const sim::SimResult fixed = toy.run(0, sim::MigrationMode::kBlocking);
  const sim::SimResult longer = toy.run(1000, sim::MigrationMode::kBlocking);
  CHECK(longer.rebalances.empty());
  CHECK(longer.step_latency == fixed.step_latency);
  CHECK(longer.traffic == fixed.traffic);
  for (std::size_t g = 0; g < fixed.gpus.size(); ++g) CHECK(longer.gpus[g].energy == fixed.gpus[g].energy);
}

TEST_CASE("rebalance: the moves are the changed holders, and their bytes are copies x an expert's weights") {
  // The window of steps 0-2 sees experts 0 and 2 only: balance() puts 0 on rank 0, 2 on rank 1, then
  // 1 and 3 (no load, ties to the lowest rank) on rank 0; experts 1, 2 and 3 change ranks.
  const Toy toy;
  sim::RoutingCounts c;
  c.load = {{1.0, 0.0, 1.0, 0.0}};
  const std::vector<sim::ExpertMove> moves = sim::expert_moves(toy.placement, balance(toy.arch, 2, c), {0, 0});
  REQUIRE(moves.size() == 3);
  CHECK(moves[0] == sim::ExpertMove{0, 1, 1, 0});
  CHECK(moves[1] == sim::ExpertMove{0, 2, 0, 1});
  CHECK(moves[2] == sim::ExpertMove{0, 3, 1, 0});

  const sim::SimResult r = toy.run(3, sim::MigrationMode::kBlocking);
  REQUIRE(r.rebalances.size() == 1);  // before step 3 only (6 steps)
  const sim::RebalanceEvent& e = r.rebalances.front();
  CHECK(e.step == 3);
  CHECK(e.experts_moved == 3);
  const double expert_bytes = 3.0 * 1024 * 1024 * 2;  // SwiGLU: 3 projections of 1024 x 1024 bf16
  CHECK(models::expert_weight_bytes(toy.arch) == expert_bytes);
  CHECK(e.bytes == 3 * expert_bytes);
  // Rank 1 sends two copies as one batch while rank 0 sends one the other way (full-duplex ports):
  // the batch of two sets the time.
  CHECK(e.seconds == doctest::Approx(kLatency + 2 * expert_bytes / kBandwidth).epsilon(1e-6));
  // Migration bytes are reported apart from the workload's traffic.
  const sim::SimResult free_run = toy.run(3, sim::MigrationMode::kFree);
  CHECK(r.traffic == free_run.traffic);
}

TEST_CASE("rebalance: step ranges make the same decisions as one engine (skipped steps are counted and solved)") {
  const Toy toy;
  for (const auto mode : {sim::MigrationMode::kBlocking, sim::MigrationMode::kBackground}) {
    const sim::SimResult whole = toy.run(2, mode);
    const sim::SimResult merged = sim::merge_step_ranges({toy.run(2, mode, 0, 3), toy.run(2, mode, 3, 6)});
    REQUIRE(merged.step_latency.size() == whole.step_latency.size());
    for (std::size_t i = 0; i < whole.step_latency.size(); ++i)
      CHECK(merged.step_latency[i] == doctest::Approx(whole.step_latency[i]).epsilon(1e-9));
    REQUIRE(merged.rebalances.size() == whole.rebalances.size());
    for (std::size_t i = 0; i < whole.rebalances.size(); ++i) {
      CHECK(merged.rebalances[i].step == whole.rebalances[i].step);
      CHECK(merged.rebalances[i].experts_moved == whole.rebalances[i].experts_moved);
      CHECK(merged.rebalances[i].seconds == doctest::Approx(whole.rebalances[i].seconds).epsilon(1e-9));
    }
  }
}

TEST_CASE("rebalance: blocking adds exactly the migration time to the step it stops") {
  const Toy toy;
  const sim::SimResult blocking = toy.run(3, sim::MigrationMode::kBlocking);
  const sim::SimResult free_run = toy.run(3, sim::MigrationMode::kFree);
  REQUIRE(blocking.rebalances.size() == 1);
  REQUIRE(free_run.rebalances.size() == 1);
  CHECK(free_run.rebalances.front().seconds == 0.0);
  CHECK(free_run.rebalances.front().bytes == blocking.rebalances.front().bytes);
  const double moved = blocking.rebalances.front().seconds;
  CHECK(moved > 0.0);
  REQUIRE(blocking.step_latency.size() == free_run.step_latency.size());
  for (std::size_t i = 0; i < blocking.step_latency.size(); ++i) {
    CAPTURE(i);
    const double expected = free_run.step_latency[i] + (i == 3 ? moved : 0.0);
    CHECK(blocking.step_latency[i] == doctest::Approx(expected).epsilon(1e-12));
  }
  // The new placement serves from step 3: balanced steps are faster than the unbalanced ones before.
  CHECK(free_run.step_latency[4] < free_run.step_latency[2]);
}

TEST_CASE("rebalance: background moves share the links with the step's traffic, the new placement serves next") {
  const Toy toy;
  const sim::SimResult fixed = toy.run(0, sim::MigrationMode::kBlocking);
  const sim::SimResult background = toy.run(3, sim::MigrationMode::kBackground);
  const sim::SimResult blocking = toy.run(3, sim::MigrationMode::kBlocking);
  const sim::SimResult free_run = toy.run(3, sim::MigrationMode::kFree);
  REQUIRE(background.rebalances.size() == 1);
  const double moved = background.rebalances.front().seconds;
  CHECK(moved > 0.0);
  // Step 3 runs on the old placement, as the static run's step 3 does, but slower: the copies take
  // link bandwidth (and SMs) from its dispatch and combine. The copies end inside the step, so what
  // the step loses is less than their time alone.
  CHECK(moved < fixed.step_latency[3]);
  CHECK(background.step_latency[3] > fixed.step_latency[3] * 1.001);
  CHECK(background.step_latency[3] < fixed.step_latency[3] + blocking.rebalances.front().seconds);
  // From step 4 on, the new placement serves, as it does after a free move.
  for (std::size_t i = 4; i < 6; ++i)
    CHECK(background.step_latency[i] == doctest::Approx(free_run.step_latency[i]).epsilon(1e-12));
  // Background moves take longer than the same moves alone (they share the links).
  CHECK(moved > blocking.rebalances.front().seconds);
}

TEST_CASE("rebalance: on two phases whose second favours other experts, rebalancing beats the static placement") {
  // Phase 1 routes to experts 0 and 2, phase 2 to experts 0 and 1. The static placement is solved on
  // phase 1 (0 and 1 on rank 0, 2 and 3 on rank 1), so phase 2 sends every token to rank 0; rebalancing
  // every 2 steps moves expert 1 away after the first window of phase 2.
  Toy toy;
  sim::RoutingCounts phase1;
  phase1.load = {{1.0, 0.0, 1.0, 0.0}};
  toy.placement = balance(toy.arch, 2, phase1);
  const traces::MemoryTrace second =
      toy_trace(toy.arch, 8, 8192, [](int, int t) { return std::vector<int>{t % 2 == 0 ? 0 : 1}; });
  auto run = [&](int every) {
    return sim::run_isolated([&] {
      auto a = traces::read_memory_trace(toy.trace);
      auto b = traces::read_memory_trace(second);
      std::vector<sim::SourcePhase> phases;
      phases.push_back({sim::make_prefill_source(*a, 2, 16384), 4});
      phases.push_back({sim::make_prefill_source(*b, 2, 16384), 8});
      auto source = sim::make_phased_source(std::move(phases));
      sim::EngineInput in;
      in.arch = &toy.arch;
      in.cluster = &toy.cluster;
      in.profile = &toy.profile;
      in.placement = &toy.placement;
      in.ep = 2;
      in.workload = &toy.workload;
      in.steps = source.get();
      in.options.steps = 12;
      in.options.rebalance.every_steps = every;
      in.resolve = [&](const sim::RoutingCounts& c) { return balance(toy.arch, 2, c); };
      return sim::simulate(in);
    });
  };
  const sim::SimResult fixed = run(0);
  const sim::SimResult moving = run(2);
  // Phase 1 (steps 0-3): the placement fits; no expert moves.
  for (const auto& e : moving.rebalances)
    if (e.step < 4) CHECK(e.experts_moved == 0);
  // Phase 2 (steps 4-11): the window holding phase-2 steps moves expert 1 (and the p50 drops).
  const std::vector<double> fixed2(fixed.step_latency.begin() + 4, fixed.step_latency.end());
  const std::vector<double> moving2(moving.step_latency.begin() + 4, moving.step_latency.end());
  const int moved = std::accumulate(moving.rebalances.begin(), moving.rebalances.end(), 0,
                                    [](int n, const sim::RebalanceEvent& e) { return n + e.experts_moved; });
  CHECK(moved > 0);
  CHECK(common::percentile(moving2, 0.5) < common::percentile(fixed2, 0.5));
}
