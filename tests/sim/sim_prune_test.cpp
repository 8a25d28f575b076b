// Links that can never limit a transfer are left out of the SimGrid routes (docs/simulator.md,
// "Platform"): the same simulation with every fabric link in every route gives the same results, on
// multi-node clusters of each topology, flat and hierarchical dispatch, with contention.
#include <doctest/doctest.h>

#include <string>

#include "sim/engine/fabric.hpp"
#include "sim/engine/isolate.hpp"
#include "sim/engine/platform.hpp"
#include "tests/sim/sim_fixtures.hpp"

using namespace moesim;
using moesim::testing::shipped_deepseek_setup;
using moesim::testing::simulate_setup;

namespace {

void check_same(const sim::SimResult& pruned, const sim::SimResult& whole) {
  REQUIRE(pruned.step_latency.size() == whole.step_latency.size());
  for (std::size_t i = 0; i < whole.step_latency.size(); ++i) {
    INFO("step " << i << ": pruned " << pruned.step_latency[i] << ", whole " << whole.step_latency[i]);
    CHECK(pruned.step_latency[i] == doctest::Approx(whole.step_latency[i]).epsilon(1e-9));
  }
  CHECK(pruned.compute_actual == doctest::Approx(whole.compute_actual).epsilon(1e-9));
  for (std::size_t g = 0; g < whole.gpus.size(); ++g) {
    CHECK(pruned.gpus[g].comm_busy == doctest::Approx(whole.gpus[g].comm_busy).epsilon(1e-9));
    CHECK(pruned.gpus[g].energy == doctest::Approx(whole.gpus[g].energy).epsilon(1e-9));
  }
}

}  // namespace

TEST_CASE("platform: links that cannot limit a transfer are left out, and the results are the same") {
  // Rails joined by a non-blocking spine (NICs private, rails and spine never full), one switch with
  // one NIC per node (the NIC shared by 8 GPUs: kept), and an oversubscribed two-level fat tree (its
  // uplinks can fill: kept).
  for (const std::string cluster : {"h200-2x8-400g-per-gpu", "h200-2x8-800g", "fat tree"}) {
    for (const auto dispatch : {sim::DispatchMode::kFlat, sim::DispatchMode::kHierarchical}) {
      CAPTURE(cluster);
      CAPTURE(sim::dispatch_mode_name(dispatch));
      auto c = shipped_deepseek_setup(sim::WorkloadMode::kPrefill);
      c.cluster = cluster == "fat tree" ? moesim::testing::oversubscribed_fat_tree() : models::load_cluster(cluster);
      c.ep = 16;
      c.placement = moesim::testing::identity_placement(c.arch, c.ep);
      c.options.dispatch = dispatch;
      c.options.warmup_steps = 0;
      c.options.steps = 2;
      auto whole = c.options;
      whole.prune_routes = false;
      check_same(simulate_setup(c, c.options), simulate_setup(c, whole));
    }
  }
}

TEST_CASE("platform: what is pruned: never a GPU port or a shared link; private NICs, rails, non-blocking uplinks") {
  const auto profile = models::load_profile("h200");
  // Each number comes from a platform built in a process of its own (one SimGrid engine each).
  auto figures = [&](const std::string& name, bool prune) {
    return sim::run_isolated([&] {
      const auto cluster = models::load_cluster(name);
      const sim::Fabric fabric(cluster, profile);
      std::vector<std::string> args{"test"};
      std::vector<char*> argv{args[0].data(), nullptr};
      int argc = 1;
      simgrid::s4u::Engine engine(&argc, argv.data());
      const sim::Platform platform(fabric, {}, prune);
      sim::SimResult r;
      r.step_latency.push_back(platform.pruned_links());
      // A transfer waits the whole fabric route's latency, or its own when longer.
      for (int a : {0, 3, 9})
        for (int b : {1, 8, 15})
          if (a != b) {
            const sim::RouteFigures f = fabric.figures(a, b);
            r.step_latency.push_back(platform.transfer_latency(a, b, 1e6, 0.0) / f.latency);
            r.step_latency.push_back(platform.transfer_latency(a, b, 1e6, 1e-3));
          }
      return r;
    });
  };
  // Rails: 16 private NICs, 8 unlimited rail switches and 8 rail uplinks (each carries at most what
  // its rail's 2 GPUs send or receive, 2 x 48.5 GB/s, below its 100 GB/s); the shared spine is kept.
  const auto rails = figures("h200-2x8-400g-per-gpu", true);
  CHECK(rails.step_latency[0] == 32);
  CHECK(figures("h200-2x8-400g-per-gpu", false).step_latency[0] == 0);
  // One NIC per node, shared by its 8 GPUs: kept; the switch is shared: kept.
  CHECK(figures("h200-2x8-800g", true).step_latency[0] == 0);
  for (std::size_t i = 1; i < rails.step_latency.size(); i += 2) {
    CHECK(rails.step_latency[i] == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(rails.step_latency[i + 1] == 1e-3);
  }
}
