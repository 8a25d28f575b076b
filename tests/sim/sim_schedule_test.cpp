// The schedules real engines run: dispatch and combine on streams of their own, so that a chunk's
// dispatch runs ahead of an earlier chunk's combine (the chunk pipeline can overlap), and two-batch
// overlap (EngineOptions::micro_batches = 2): one micro-batch's attention runs while the other's
// dispatch is in flight, over the same tokens and routing as one batch.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "tests/sim/sim_fixtures.hpp"

using namespace moesim;
using moesim::testing::SimSetup;

namespace {

constexpr std::uint8_t kAttention = 0, kExpert = 3, kDispatch = 6, kCombine = 7;

// Prefill of 4096 tokens on 4 GPUs (8 experts, top-2) over a 10 GB/s fabric: dispatch and expert
// compute of comparable length, so that overlap has something to hide.
SimSetup pipeline_setup() {
  SimSetup c;
  c.arch = testing::toy_arch(8, 2);
  c.cluster = testing::toy_cluster(4, 10e9, 1e-6);
  c.profile = testing::toy_profile();
  c.ep = 4;
  c.placement = testing::identity_placement(c.arch, c.ep);
  c.memory = testing::toy_trace(c.arch, 16, 256, [](int s, int t) {
    const int a = (s * 3 + t) % 8;
    return std::vector<int>{a, (a + 1 + t % 5) % 8};
  });
  c.workload.mode = sim::WorkloadMode::kPrefill;
  c.workload.tokens_per_step = 4096;
  c.options.steps = 2;
  c.options.timeline_steps = 1;
  c.options.layer_chunks = {1};
  return c;
}

const sim::TimelineEvent* find(const std::vector<sim::TimelineEvent>& tl, int gpu, std::uint8_t category, int nth) {
  for (const auto& e : tl)
    if (e.gpu == gpu && e.category == category && nth-- == 0) return &e;
  return nullptr;
}

double total_rank_tokens(const sim::SimResult& r) {
  double n = 0;
  for (const auto& l : r.layers) n += std::accumulate(l.rank_tokens.begin(), l.rank_tokens.end(), 0.0);
  return n;
}

}  // namespace

TEST_CASE("schedule: a chunk's dispatch runs ahead of the earlier chunk's combine, and chunks can overlap") {
  SimSetup c = pipeline_setup();
  sim::EngineOptions one = c.options, two = c.options;
  one.contention = two.contention = false;
  two.layer_chunks = {2};
  const auto seq = testing::simulate_setup(c, one);
  const auto chunked = testing::simulate_setup(c, two);
  for (int gpu = 0; gpu < 4; ++gpu) {
    CAPTURE(gpu);
    const auto* d1 = find(chunked.timeline, gpu, kDispatch, 1);
    const auto* c0 = find(chunked.timeline, gpu, kCombine, 0);
    REQUIRE(d1 != nullptr);
    REQUIRE(c0 != nullptr);
    // Chunk 1's dispatch starts as soon as chunk 0's is done: before chunk 0's experts can finish.
    CHECK(d1->begin < c0->begin);
    const auto* d0 = find(chunked.timeline, gpu, kDispatch, 0);
    CHECK(d1->begin == doctest::Approx(d0->end).epsilon(1e-9));
  }
  // Without contention the hidden communication shows: two chunks end the step sooner.
  CHECK(chunked.step_latency[0] < seq.step_latency[0]);
  CHECK(total_rank_tokens(chunked) == total_rank_tokens(seq));
}

TEST_CASE("schedule: two-batch overlap runs one micro-batch's attention under the other's dispatch") {
  SimSetup c = pipeline_setup();
  sim::EngineOptions one = c.options, tbo = c.options;
  one.contention = tbo.contention = false;
  tbo.micro_batches = 2;
  const auto seq = testing::simulate_setup(c, one);
  const auto two = testing::simulate_setup(c, tbo);
  for (int gpu = 0; gpu < 4; ++gpu) {
    CAPTURE(gpu);
    const auto* d0 = find(two.timeline, gpu, kDispatch, 0);
    const auto* a1 = find(two.timeline, gpu, kAttention, 1);
    REQUIRE(d0 != nullptr);
    REQUIRE(a1 != nullptr);
    // Micro-batch 1's attention starts after micro-batch 0's and before its dispatch ends.
    CHECK(a1->begin < d0->end);
    CHECK(a1->end > d0->begin);
    // Two expert computations per GPU and layer, one per micro-batch.
    CHECK(find(two.timeline, gpu, kExpert, 1) != nullptr);
  }
  // The same tokens are routed to the same ranks; the overlap ends the step sooner.
  CHECK(total_rank_tokens(two) == doctest::Approx(total_rank_tokens(seq)));
  CHECK(two.tokens == seq.tokens);
  CHECK(two.step_latency[0] < seq.step_latency[0]);
  // Each GPU's compute is the same work in both (two half GEMMs and half attentions).
  CHECK(two.compute_alone == doctest::Approx(seq.compute_alone).epsilon(0.05));
}

TEST_CASE("schedule: dispatch that holds no SM (a copy engine, RDMA) slows no compute; NCCL's SMs do") {
  SimSetup c = pipeline_setup();
  sim::EngineOptions nccl = c.options, rdma = c.options;
  nccl.contention = rdma.contention = true;
  nccl.layer_chunks = rdma.layer_chunks = {2};
  rdma.dispatch_sms = 0;
  const auto with_sms = testing::simulate_setup(c, nccl);
  const auto no_sms = testing::simulate_setup(c, rdma);
  // The toy profile's one grid (any op, class and SM count) slows compute under communication...
  CHECK(with_sms.compute_actual > with_sms.compute_alone * 1.001);
  // ...but communication that takes no SM leaves every compute task at its time alone.
  CHECK(no_sms.compute_actual == doctest::Approx(no_sms.compute_alone).epsilon(1e-12));
  CHECK(no_sms.step_latency[0] < with_sms.step_latency[0]);
}
