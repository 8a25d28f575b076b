// Steps in parallel (docs/simulator.md): steps meet at a barrier with every GPU idle, so a
// simulation cut into step ranges, each in its own engine, and merged gives what one engine gives,
// to 1e-9, for every reported number; the plan of ranges depends on the step counts alone.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "common/error.hpp"
#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "models/profile.hpp"
#include "sim/engine/engine.hpp"
#include "sim/engine/step_source.hpp"
#include "tests/sim/sim_fixtures.hpp"
#include "tests/support/test_support.hpp"
#include "traces/trace.hpp"

using namespace moesim;

namespace {

using Setup = moesim::testing::SimSetup;

sim::SimResult run(const Setup& c, int first, int end) {
  sim::EngineOptions options = c.options;
  options.first_step = first;
  options.end_step = end;
  return moesim::testing::simulate_setup(c, options);
}

void close(double got, double want, const std::string& what) {
  INFO(what << ": in ranges " << got << ", one engine " << want);
  CHECK(std::abs(got - want) <= 1e-9 * std::abs(want) + 1e-15);
}

void check_same(const sim::SimResult& ranges, const sim::SimResult& one) {
  REQUIRE(ranges.step_latency.size() == one.step_latency.size());
  for (std::size_t i = 0; i < one.step_latency.size(); ++i)
    close(ranges.step_latency[i], one.step_latency[i], "step " + std::to_string(i));
  close(ranges.measured_time, one.measured_time, "measured time");
  close(ranges.compute_actual, one.compute_actual, "compute as simulated");
  close(ranges.compute_alone, one.compute_alone, "compute alone");
  CHECK(ranges.tokens == one.tokens);
  CHECK(ranges.activities == one.activities);
  CHECK(ranges.trace_repeated == one.trace_repeated);
  REQUIRE(ranges.gpus.size() == one.gpus.size());
  for (std::size_t g = 0; g < one.gpus.size(); ++g) {
    const std::string gpu = "GPU " + std::to_string(g) + " ";
    close(ranges.gpus[g].energy, one.gpus[g].energy, gpu + "energy");
    close(ranges.gpus[g].compute_busy, one.gpus[g].compute_busy, gpu + "compute busy");
    close(ranges.gpus[g].comm_busy, one.gpus[g].comm_busy, gpu + "comm busy");
    close(ranges.gpus[g].both_busy, one.gpus[g].both_busy, gpu + "both busy");
    close(ranges.gpus[g].peak_power, one.gpus[g].peak_power, gpu + "peak power");
    for (std::size_t d = 0; d < one.traffic[g].size(); ++d)
      close(ranges.traffic[g][d], one.traffic[g][d], gpu + "traffic to " + std::to_string(d));
  }
  REQUIRE(ranges.layers.size() == one.layers.size());
  for (std::size_t l = 0; l < one.layers.size(); ++l) {
    const std::string layer = "layer " + std::to_string(l) + " ";
    close(ranges.layers[l].token_tail, one.layers[l].token_tail, layer + "token tail");
    close(ranges.layers[l].token_avg, one.layers[l].token_avg, layer + "token avg");
    close(ranges.layers[l].a2a_tail, one.layers[l].a2a_tail, layer + "a2a tail");
    close(ranges.layers[l].a2a_avg, one.layers[l].a2a_avg, layer + "a2a avg");
    REQUIRE(ranges.layers[l].rank_tokens.size() == one.layers[l].rank_tokens.size());
    for (std::size_t r = 0; r < one.layers[l].rank_tokens.size(); ++r)
      close(ranges.layers[l].rank_tokens[r], one.layers[l].rank_tokens[r], layer + "tokens of rank " + std::to_string(r));
  }
  REQUIRE(ranges.timeline.size() == one.timeline.size());
  for (std::size_t i = 0; i < one.timeline.size(); ++i) {
    const auto& a = ranges.timeline[i];
    const auto& b = one.timeline[i];
    CHECK(a.category == b.category);
    CHECK(a.stream == b.stream);
    CHECK(a.layer == b.layer);
    CHECK(a.gpu == b.gpu);
    CHECK(a.step == b.step);
    close(a.begin, b.begin, "timeline event start");
    close(a.end, b.end, "timeline event end");
  }
}

// The given cuts of warmup + measured steps, each range in its own engine, merged.
sim::SimResult in_ranges(const Setup& c, const std::vector<int>& cuts) {
  std::vector<sim::SimResult> parts;
  int first = 0;
  for (int end : cuts) {
    parts.push_back(run(c, first, end));
    first = end;
  }
  return sim::merge_step_ranges(parts);
}

Setup shipped_deepseek(sim::WorkloadMode mode) { return moesim::testing::shipped_deepseek_setup(mode); }

}  // namespace

TEST_CASE("sim: the plan of step ranges covers every step once and depends on the step counts alone") {
  for (int warmup : {0, 1, 5})
    for (int steps : {1, 3, 24, 25, 49, 50, 100, 101, 199, 200, 1000}) {
      INFO("warmup " << warmup << ", steps " << steps);
      const auto ranges = sim::step_ranges(warmup, steps);
      REQUIRE(!ranges.empty());
      CHECK(ranges.size() == static_cast<std::size_t>(std::clamp(steps / 25, 1, 8)));
      CHECK(ranges.front().first == 0);
      CHECK(ranges.back().end == warmup + steps);
      int smallest = steps, largest = 0;
      for (std::size_t i = 0; i < ranges.size(); ++i) {
        if (i > 0) CHECK(ranges[i].first == ranges[i - 1].end);
        const int measured = ranges[i].end - std::max(ranges[i].first, warmup);
        CHECK(measured >= 1);
        smallest = std::min(smallest, measured);
        largest = std::max(largest, measured);
      }
      CHECK(largest - smallest <= 1);
      // The timeline's steps (the first three measured) are in the first range.
      CHECK(ranges.front().end >= warmup + std::min(steps, 3));
      CHECK(sim::step_ranges(warmup, steps).size() == ranges.size());
    }
}

TEST_CASE("sim: decode on the shipped trace in three step ranges equals one engine, contention included") {
  const Setup c = shipped_deepseek(sim::WorkloadMode::kDecode);
  const auto one = run(c, 0, -1);
  CHECK(one.compute_actual > one.compute_alone);  // the overlap slows compute: contention is exercised
  check_same(in_ranges(c, {5, 7, 9}), one);  // the timeline's steps (2, 3, 4) in the first range
}

TEST_CASE("sim: prefill on the shipped trace in two step ranges equals one engine") {
  Setup c = shipped_deepseek(sim::WorkloadMode::kPrefill);
  c.options.warmup_steps = 0;
  c.options.steps = 5;
  check_same(in_ranges(c, {3, 5}), run(c, 0, -1));
}

TEST_CASE("sim: MoE and dense training, and the synthetic workload, in step ranges equal one engine") {
  SUBCASE("MoE training") {
    const Setup c = moesim::testing::toy_moe_training_setup();
    check_same(in_ranges(c, {2, 3, 5}), run(c, 0, -1));
  }
  SUBCASE("dense training") {
    Setup c;
    c.arch = moesim::testing::toy_arch(2, 1);
    c.arch.moe_layers.clear();
    c.arch.num_layers = 4;
    c.arch.dense_ffn_size = 4096;
    c.cluster = moesim::testing::toy_cluster(4, 50e9, 2e-6);
    c.profile = moesim::testing::toy_profile();
    c.ep = 4;
    c.workload.mode = sim::WorkloadMode::kTraining;
    c.workload.batch = 4;
    c.workload.sequence_length = 256;
    c.workload.micro_batches = 2;
    c.workload.gradient = sim::GradientSync::kFsdp;
    c.options.steps = 3;
    c.options.layer_chunks.assign(4, 2);
    check_same(in_ranges(c, {1, 3}), run(c, 0, -1));
  }
  SUBCASE("synthetic") {
    const Setup c = moesim::testing::toy_synthetic_setup(true);
    check_same(in_ranges(c, {3, 4, 5}), run(c, 0, -1));
  }
}

TEST_CASE("sim: a step range without a measured step is refused, and so is a timeline outside the first range") {
  Setup c = shipped_deepseek(sim::WorkloadMode::kDecode);
  // Steps 0 and 1 are the warmup: a range of warmup steps alone measures nothing.
  CHECK_THROWS_WITH_AS(run(c, 0, 2), doctest::Contains("holds no measured step"), common::RunError);
  // Later ranges start their clock at zero: their timeline events would be misplaced.
  CHECK_THROWS_WITH_AS(in_ranges(c, {3, 9}), doctest::Contains("first step range"), common::RunError);
}
