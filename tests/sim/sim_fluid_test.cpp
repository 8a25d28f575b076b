// The fluid network against SimGrid's flows (docs/simulator.md, "Network fidelity"): the same
// simulation under network fidelity "auto" (the engine's fluid network) and "flow" (one SimGrid
// flow per transfer), trace-driven, on one node and on several of each topology, flat, hierarchical
// and low-latency dispatch, in prefill, decode, two-batch overlap and MoE training.
// - Without contention the two are the same model solved two ways: every step time, busy time,
//   energy and per-layer all-to-all time agree with SimGrid's full update (network/optim:Full) to
//   SimGrid's own precision (it merges events less than surf/precision, 1 ns, apart, and treats a
//   link as full within maxmin/precision, 1e-5): 1e-5. SimGrid's default lazy update now and then
//   leaves a running flow at its rate for a few microseconds when another one's latency ends on a
//   link they share.
// - With contention, a GPU's slowdown switches at the instants its computes and transfers start and
//   end, so a timing difference of picoseconds can switch it a transfer earlier or later: the step
//   times agree within the fast path's stated bound (2%), by about 1e-3 on these cases.
#include <doctest/doctest.h>

#include <string>

#include "tests/sim/sim_fixtures.hpp"

using namespace moesim;
using moesim::testing::shipped_deepseek_setup;
using moesim::testing::simulate_setup;

namespace {

constexpr double kSameModel = 1e-5;
constexpr double kStatedBound = 0.02;

sim::EngineOptions with(const sim::EngineOptions& base, sim::NetworkFidelity fidelity, bool contention,
                        std::vector<std::string> cfg = {}) {
  auto o = base;
  o.fidelity = fidelity;
  o.contention = contention;
  o.simgrid_cfg = std::move(cfg);
  return o;
}

void check_both(const testing::SimSetup& c) {
  {
    const auto fluid = simulate_setup(c, with(c.options, sim::NetworkFidelity::kAuto, false));
    const auto flow = simulate_setup(c, with(c.options, sim::NetworkFidelity::kFlow, false, {"network/optim:Full"}));
    CHECK(fluid.fluid_flows > 0);
    CHECK(flow.fluid_flows == 0);
    REQUIRE(fluid.step_latency.size() == flow.step_latency.size());
    for (std::size_t i = 0; i < flow.step_latency.size(); ++i) {
      INFO("step " << i << ": fluid " << fluid.step_latency[i] << ", flow " << flow.step_latency[i]);
      CHECK(fluid.step_latency[i] == doctest::Approx(flow.step_latency[i]).epsilon(kSameModel));
    }
    for (std::size_t g = 0; g < flow.gpus.size(); ++g) {
      CHECK(fluid.gpus[g].comm_busy == doctest::Approx(flow.gpus[g].comm_busy).epsilon(kSameModel));
      CHECK(fluid.gpus[g].energy == doctest::Approx(flow.gpus[g].energy).epsilon(kSameModel));
    }
    for (std::size_t l = 0; l < flow.layers.size(); ++l)
      CHECK(fluid.layers[l].a2a_tail == doctest::Approx(flow.layers[l].a2a_tail).epsilon(kSameModel));
  }
  const auto fluid = simulate_setup(c, with(c.options, sim::NetworkFidelity::kAuto, true));
  const auto flow = simulate_setup(c, with(c.options, sim::NetworkFidelity::kFlow, true));
  REQUIRE(fluid.step_latency.size() == flow.step_latency.size());
  for (std::size_t i = 0; i < flow.step_latency.size(); ++i) {
    INFO("with contention, step " << i << ": fluid " << fluid.step_latency[i] << ", flow " << flow.step_latency[i]);
    CHECK(fluid.step_latency[i] == doctest::Approx(flow.step_latency[i]).epsilon(kStatedBound));
  }
}

}  // namespace

TEST_CASE("fluid network: the shipped trace on one node gives SimGrid's step times (prefill, decode, two batches)") {
  for (const auto mode : {sim::WorkloadMode::kPrefill, sim::WorkloadMode::kDecode}) {
    for (const int micro_batches : {1, 2}) {
      CAPTURE(sim::workload_mode_name(mode));
      CAPTURE(micro_batches);
      auto c = shipped_deepseek_setup(mode);
      c.options.micro_batches = micro_batches;
      c.options.steps = 3;
      check_both(c);
    }
  }
}

TEST_CASE("fluid network: several nodes, each topology, flat, hierarchical and low-latency dispatch") {
  for (const std::string cluster : {"h200-2x8-400g-per-gpu", "h200-2x8-800g", "fat tree"}) {
    for (const auto dispatch :
         {sim::DispatchMode::kFlat, sim::DispatchMode::kHierarchical, sim::DispatchMode::kLowLatency}) {
      CAPTURE(cluster);
      CAPTURE(sim::dispatch_mode_name(dispatch));
      auto c = shipped_deepseek_setup(sim::WorkloadMode::kDecode);
      c.cluster = cluster == "fat tree" ? moesim::testing::oversubscribed_fat_tree() : models::load_cluster(cluster);
      c.profile = models::load_profile("h200");
      c.ep = 16;
      c.placement = moesim::testing::identity_placement(c.arch, c.ep);
      c.workload.batch_sequences = 64;
      c.options.dispatch = dispatch;
      c.options.warmup_steps = 0;
      c.options.steps = 2;
      check_both(c);
    }
  }
}

TEST_CASE("fluid network: MoE training and the synthetic workload give SimGrid's step times") {
  check_both(moesim::testing::toy_moe_training_setup());
  // Two nodes: no aggregation, every transfer in the fluid network.
  auto c = moesim::testing::toy_synthetic_setup(true);
  c.cluster = models::load_cluster("h200-2x8-800g");
  c.profile = models::load_profile("h200");
  c.ep = 16;
  check_both(c);
}
