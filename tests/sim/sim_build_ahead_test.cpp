// Building ahead (docs/simulator.md): step graphs built on a worker thread while the engine runs the
// step before give exactly what building each step in the engine's thread gives, every reported
// number and the timeline bit for bit; the builder draws exactly the steps simulated, and a step
// that cannot be built fails the run with its own error.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
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

sim::SimResult run(const Setup& c, bool ahead) {
  sim::EngineOptions options = c.options;
  options.build_ahead = ahead;
  return moesim::testing::simulate_setup(c, options);
}

void check_identical(const Setup& c) {
  const auto inline_built = run(c, false);
  const auto ahead = run(c, true);
  REQUIRE(!inline_built.step_latency.empty());
  auto a = sim::to_json(ahead), b = sim::to_json(inline_built);
  a.erase("wall_s");
  b.erase("wall_s");
  CHECK(a == b);  // every number, exactly
  CHECK(ahead.timeline == inline_built.timeline);
  if (c.options.timeline_steps > 0) CHECK(!ahead.timeline.empty());
}

Setup shipped_deepseek(sim::WorkloadMode mode) { return moesim::testing::shipped_deepseek_setup(mode); }

Setup toy_moe_training() {
  Setup c = moesim::testing::toy_moe_training_setup();
  c.options.timeline_steps = 2;
  return c;
}

// A step source that hands out the steps of `inner` and fails when asked for step `fail_at`
// (counting from 0). Asked for a step at or after `limit`, it ends the simulation process at once: a
// builder drawing ahead past the last step would fail the run even if that step is never taken.
class FailingSource : public sim::StepSource {
 public:
  FailingSource(std::unique_ptr<sim::StepSource> inner, int fail_at, int limit)
      : inner_(std::move(inner)), fail_at_(fail_at), limit_(limit) {}
  bool next(sim::StepBatch& step) override {
    const int i = asked_++;
    if (i == fail_at_) throw common::InputError("record of step " + std::to_string(i) + " is corrupt");
    if (i >= limit_) {
      std::fprintf(stderr, "step %d was drawn, beyond the %d simulated\n", i, limit_);
      std::_Exit(9);
    }
    return inner_->next(step);
  }
  bool repeated() const override { return inner_->repeated(); }
  std::uint64_t sequences_started() const override { return inner_->sequences_started(); }

 private:
  std::unique_ptr<sim::StepSource> inner_;
  int fail_at_, limit_, asked_ = 0;
};

// Simulates the shipped-trace setup `c` with steps drawn through a FailingSource.
sim::SimResult run_failing(const Setup& c, bool ahead, int fail_at, int limit) {
  return sim::run_isolated([&] {
    auto reader = traces::open_trace(c.trace);
    FailingSource source(sim::make_prefill_source(*reader, c.ep, c.workload.tokens_per_step), fail_at, limit);
    sim::EngineInput in;
    in.arch = &c.arch;
    in.cluster = &c.cluster;
    in.profile = &c.profile;
    in.placement = &c.placement;
    in.ep = c.ep;
    in.workload = &c.workload;
    in.steps = &source;
    in.options = c.options;
    in.options.build_ahead = ahead;
    return sim::simulate(in);
  });
}

}  // namespace

TEST_CASE("sim: building ahead gives the same decode and prefill on the shipped trace, bit for bit") {
  SUBCASE("decode, overlapped, contention") { check_identical(shipped_deepseek(sim::WorkloadMode::kDecode)); }
  SUBCASE("prefill, overlapped, contention") { check_identical(shipped_deepseek(sim::WorkloadMode::kPrefill)); }
  SUBCASE("prefill, hierarchical dispatch, sequential") {
    Setup c = shipped_deepseek(sim::WorkloadMode::kPrefill);
    c.options.dispatch = sim::DispatchMode::kHierarchical;
    c.options.layer_chunks.assign(c.options.layer_chunks.size(), 1);
    check_identical(c);
  }
  SUBCASE("a later step range") {
    Setup c = shipped_deepseek(sim::WorkloadMode::kDecode);
    c.options.first_step = 4;
    check_identical(c);
  }
}

TEST_CASE("sim: building ahead gives the same MoE training and synthetic workload, bit for bit") {
  SUBCASE("MoE training") { check_identical(toy_moe_training()); }
  SUBCASE("synthetic") {
    Setup c = moesim::testing::toy_synthetic_setup(false);
    c.options.timeline_steps = 1;
    check_identical(c);
  }
  SUBCASE("a single step") {
    Setup c = toy_moe_training();
    c.options.warmup_steps = 0;
    c.options.steps = 1;
    check_identical(c);
  }
}

TEST_CASE("sim: the builder draws exactly the steps simulated") {
  Setup c = shipped_deepseek(sim::WorkloadMode::kPrefill);
  c.options.warmup_steps = 1;
  c.options.steps = 5;
  for (bool ahead : {false, true}) {
    INFO("build ahead " << ahead);
    // Drawing a seventh step ends the process; six steps are simulated.
    const auto r = run_failing(c, ahead, -1, 6);
    CHECK(r.step_latency.size() == 5);
  }
}

TEST_CASE("sim: a step that cannot be built fails the run with its own error, built ahead or not") {
  Setup c = shipped_deepseek(sim::WorkloadMode::kPrefill);
  c.options.warmup_steps = 0;
  c.options.steps = 6;
  for (bool ahead : {false, true}) {
    INFO("build ahead " << ahead);
    CHECK_THROWS_WITH_AS(run_failing(c, ahead, 3, 100), "record of step 3 is corrupt", common::InputError);
    CHECK_THROWS_WITH_AS(run_failing(c, ahead, 0, 100), "record of step 0 is corrupt", common::InputError);
  }
}
