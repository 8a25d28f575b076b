// The aggregated uniform all-to-all (docs/simulator.md, "Aggregated uniform all-to-all"): on a
// private star, one flow per GPU gives the same step times, energy, busy times, per-layer
// all-to-all times and traffic as the n(n-1) flows it replaces, to 1e-9; where the rule does not
// hold (an NVLink mesh, GPUs on several nodes, user SimGrid settings, messages that round to no
// byte) every flow runs alone.
#include <doctest/doctest.h>

#include <string>

#include "sim/engine/engine.hpp"
#include "sim/engine/step_source.hpp"
#include "tests/sim/sim_fixtures.hpp"

using namespace moesim;
using moesim::testing::toy_arch;
using moesim::testing::toy_cluster;
using moesim::testing::toy_profile;

namespace {

struct SyntheticCase {
  models::Architecture arch = toy_arch(2, 1);
  models::Cluster cluster;
  models::Profile profile = toy_profile();
  sim::Placement placement;
  sim::Workload workload;
  sim::EngineOptions options;
  int gpus = 1;
};

SyntheticCase synthetic(int gpus, double bw, double latency, double compute, double bytes_per_gpu, bool overlap) {
  SyntheticCase c;
  c.cluster = toy_cluster(gpus, bw, latency);
  c.gpus = gpus;
  c.workload.mode = sim::WorkloadMode::kSynthetic;
  c.workload.synthetic_layers = 2;
  c.workload.synthetic_compute = compute;
  c.workload.synthetic_a2a_bytes = bytes_per_gpu;
  c.workload.synthetic_overlap = overlap;
  c.options.steps = 2;
  c.options.warmup_steps = 1;
  return c;
}

sim::SimResult run(const SyntheticCase& c, bool merge) {
  return sim::run_isolated([&] {
    sim::EngineInput in;
    in.arch = &c.arch;
    in.cluster = &c.cluster;
    in.profile = &c.profile;
    in.placement = &c.placement;
    in.ep = c.gpus;
    in.tp = 1;
    in.workload = &c.workload;
    in.options = c.options;
    in.options.fidelity = merge ? sim::NetworkFidelity::kAuto : sim::NetworkFidelity::kFlow;
    return sim::simulate(in);
  });
}

void check_close(double got, double want, const std::string& what) {
  INFO(what << ": aggregated " << got << ", every flow " << want);
  CHECK(got == doctest::Approx(want).epsilon(1e-9));
}

// Every reported number of the two runs agrees to 1e-9.
void check_same(const sim::SimResult& merged, const sim::SimResult& flows) {
  REQUIRE(merged.step_latency.size() == flows.step_latency.size());
  for (std::size_t i = 0; i < flows.step_latency.size(); ++i)
    check_close(merged.step_latency[i], flows.step_latency[i], "step " + std::to_string(i));
  check_close(merged.compute_actual, flows.compute_actual, "compute as simulated");
  check_close(merged.compute_alone, flows.compute_alone, "compute alone");
  REQUIRE(merged.gpus.size() == flows.gpus.size());
  for (std::size_t g = 0; g < flows.gpus.size(); ++g) {
    const std::string gpu = "GPU " + std::to_string(g) + " ";
    check_close(merged.gpus[g].energy, flows.gpus[g].energy, gpu + "energy");
    check_close(merged.gpus[g].compute_busy, flows.gpus[g].compute_busy, gpu + "compute busy");
    check_close(merged.gpus[g].comm_busy, flows.gpus[g].comm_busy, gpu + "comm busy");
    check_close(merged.gpus[g].both_busy + 1.0, flows.gpus[g].both_busy + 1.0, gpu + "both busy (+1 s)");
    check_close(merged.gpus[g].peak_power, flows.gpus[g].peak_power, gpu + "peak power");
    for (std::size_t d = 0; d < flows.traffic[g].size(); ++d)
      check_close(merged.traffic[g][d] + 1.0, flows.traffic[g][d] + 1.0, gpu + "traffic to " + std::to_string(d));
  }
  REQUIRE(merged.layers.size() == flows.layers.size());
  for (std::size_t l = 0; l < flows.layers.size(); ++l) {
    check_close(merged.layers[l].a2a_tail, flows.layers[l].a2a_tail, "layer a2a tail");
    check_close(merged.layers[l].a2a_avg, flows.layers[l].a2a_avg, "layer a2a avg");
  }
}

// Activities of the whole run: a compute per GPU and phase, plus `flows_per_gpu` transfers.
std::uint64_t activities(const SyntheticCase& c, int flows_per_gpu) {
  const auto phases = static_cast<std::uint64_t>(2 * c.workload.synthetic_layers * (c.options.steps + c.options.warmup_steps));
  return phases * static_cast<std::uint64_t>(c.gpus) * static_cast<std::uint64_t>(1 + flows_per_gpu);
}

}  // namespace

TEST_CASE("sim: the aggregated uniform all-to-all matches every flow alone to 1e-9, and the hand formula") {
  const double bw = 1e9, lat = 1e-6, compute = 100e-6;
  for (int gpus : {3, 4, 7}) {
    // A per-GPU size that does not split into whole bytes: each message is rounded as the engine sends it.
    const double bytes = 1e6 + 1;
    const auto c = synthetic(gpus, bw, lat, compute, bytes, false);
    CAPTURE(gpus);
    const auto merged = run(c, true), flows = run(c, false);
    check_same(merged, flows);
    CHECK(merged.activities == activities(c, 1));
    CHECK(flows.activities == activities(c, gpus - 1));
    // The result says which ran: one aggregated flow per GPU and all-to-all, or none.
    CHECK(2 * merged.aggregated_flows == activities(c, 1));
    CHECK(flows.aggregated_flows == 0);
    // Strictly in sequence, each all-to-all lasts latency + (n-1) parts / bandwidth.
    const double part = static_cast<double>(std::llround(bytes / gpus));
    const double a2a = lat + (gpus - 1) * part / bw;
    check_close(merged.step_latency[0], 2 * 2 * (compute + a2a), "step against the formula");
  }
}

TEST_CASE("sim: the aggregated all-to-all matches every flow alone under contention, overlapped with compute") {
  // The all-to-all runs concurrently with the compute before it: both slow by the profile's factors
  // while they overlap, on every port at once.
  for (int gpus : {3, 5}) {
    for (const double bytes : {2e5, 4e6}) {
      const auto c = synthetic(gpus, 1e9, 2e-6, 100e-6, bytes, true);
      CAPTURE(gpus);
      CAPTURE(bytes);
      const auto merged = run(c, true), flows = run(c, false);
      check_same(merged, flows);
      CHECK(merged.compute_actual > merged.compute_alone);  // the contention did act
      CHECK(merged.activities < flows.activities);
    }
  }
}

TEST_CASE("sim: the all-to-all is not aggregated where the rule does not hold") {
  SUBCASE("an NVLink mesh adds a link per GPU pair") {
    auto c = synthetic(4, 1e9, 1e-6, 100e-6, 1e6, false);
    c.cluster.intra_node.kind = models::FabricKind::kNvlinkMesh;
    const auto r = run(c, true);
    CHECK(r.activities == activities(c, 3));
    CHECK(r.aggregated_flows == 0);
  }
  SUBCASE("GPUs on two nodes share NICs") {
    auto c = synthetic(4, 1e9, 1e-6, 100e-6, 1e6, false);
    c.cluster.num_nodes = 2;
    c.cluster.gpus_per_node = 2;
    c.cluster.nics.gpu_nic.assign(2, 0);
    CHECK(run(c, true).activities == activities(c, 3));
  }
  SUBCASE("user SimGrid settings may change how flows share a link") {
    auto c = synthetic(4, 1e9, 1e-6, 100e-6, 1e6, false);
    c.options.simgrid_cfg = {"network/TCP-gamma:4194304"};
    CHECK(run(c, true).activities == activities(c, 3));
  }
  SUBCASE("messages that round to no byte cost the latency alone") {
    auto c = synthetic(4, 1e9, 1e-6, 100e-6, 1.0, false);
    const auto r = run(c, true);
    CHECK(r.activities == activities(c, 3));
    check_close(r.step_latency[0], 2 * 2 * (100e-6 + 1e-6), "step of compute and latency");
  }
  SUBCASE("two GPUs already send one flow each way") {
    auto c = synthetic(2, 1e9, 1e-6, 100e-6, 1e6, false);
    CHECK(run(c, true).activities == run(c, false).activities);
  }
}
