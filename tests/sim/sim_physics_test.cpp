// Physics of the simulator on cases small enough to compute by hand: compute-only steps equal the
// cost models, transfers equal latency + bytes / bandwidth, stragglers set the layer, contention
// slows only the overlapped part, energy is the integral of power, and a power cap trades speed.
#include <doctest/doctest.h>

#include <numeric>

#include "models/costs.hpp"
#include "sim/engine/engine.hpp"
#include "sim/engine/step_source.hpp"
#include "tests/sim/sim_fixtures.hpp"

using namespace moesim;
using moesim::testing::identity_placement;
using moesim::testing::toy_arch;
using moesim::testing::toy_cluster;
using moesim::testing::toy_profile;
using moesim::testing::toy_trace;

namespace {

struct Case {
  models::Architecture arch;
  models::Cluster cluster;
  models::Profile profile;
  sim::Placement placement;
  traces::MemoryTrace trace;
  sim::Workload workload;
  sim::EngineOptions options;
  int ep = 1;
};

sim::SimResult run(const Case& c) {
  moesim::testing::SimCase sc{&c.arch, &c.cluster, &c.profile, &c.placement, &c.workload, c.ep, c.options, {}};
  if (c.trace.tokens.size() > 0) sc.open_trace = [&] { return traces::read_memory_trace(c.trace); };
  return moesim::testing::simulate_case(sc);
}

// Attention of a decode step over `contexts`, for the expected-time sums below.
double decode_attention(const Case& c, std::vector<long> contexts) {
  models::AttentionBatch b;
  b.context = contexts;
  b.new_tokens.assign(contexts.size(), 1);
  return models::attention_time(c.profile, c.arch, b, 1).time;
}

double head(const Case& c, long tokens) {
  return models::gemm_time(c.profile, c.arch.dtype, static_cast<double>(tokens), c.arch.vocab_size, c.arch.hidden_size);
}

Case decode_case(int gpus, int experts, double bw, double latency) {
  Case c{toy_arch(experts, 1), toy_cluster(gpus, bw, latency), toy_profile(), {}, {}, {}, {}, gpus};
  c.placement = identity_placement(c.arch, gpus);
  c.workload.mode = sim::WorkloadMode::kDecode;
  c.workload.batch_sequences = 4;
  c.workload.decode_staggered = false;  // every sequence from its first token: contexts equal the step
  c.options.steps = 3;
  c.options.layer_chunks = {1};
  return c;
}

}  // namespace

TEST_CASE("sim: one GPU without communication: a step costs exactly its GEMMs and attention") {
  Case c = decode_case(1, 2, 450e9, 1e-6);
  c.trace = toy_trace(c.arch, 4, 3, [](int s, int) { return std::vector<int>{s % 2}; });
  const auto r = run(c);
  REQUIRE(r.step_latency.size() == 3);
  for (long step = 0; step < 3; ++step) {
    const double expected = decode_attention(c, {step, step, step, step}) +
                            models::grouped_expert_time(c.profile, c.arch, {2, 2}, 1).time + head(c, 4);
    CHECK(r.step_latency[static_cast<std::size_t>(step)] == doctest::Approx(expected).epsilon(1e-9));
  }
  CHECK(r.traffic[0][0] == 0.0);
  CHECK(r.compute_actual == doctest::Approx(r.compute_alone).epsilon(1e-12));
}

TEST_CASE("sim: two GPUs, uniform routing: each all-to-all takes latency + bytes / bandwidth") {
  const double bw = 1e9, lat = 1e-6;
  Case c = decode_case(2, 2, bw, lat);
  // Sequences 0..3 live on ranks 0,1,0,1; each rank keeps one token and sends one to the other.
  c.trace = toy_trace(c.arch, 4, 3, [](int s, int) { return std::vector<int>{s < 2 ? s % 2 : 1 - s % 2}; });
  const auto r = run(c);
  const double bytes = 1024 * 2.0;  // hidden x bf16
  const double one_way = lat + bytes / bw;
  REQUIRE(r.layers.size() == 1);
  CHECK(r.layers[0].a2a_tail == doctest::Approx(2 * one_way).epsilon(1e-9));
  CHECK(r.layers[0].a2a_avg == doctest::Approx(2 * one_way).epsilon(1e-9));
  CHECK(r.traffic[0][1] == doctest::Approx(3 * 2 * bytes));  // dispatch + combine, 3 steps
  for (long step = 0; step < 3; ++step) {
    const double expected = decode_attention(c, {step, step}) + one_way +
                            models::grouped_expert_time(c.profile, c.arch, {2}, 1).time + one_way + head(c, 2);
    CHECK(r.step_latency[static_cast<std::size_t>(step)] == doctest::Approx(expected).epsilon(1e-9));
  }
}

TEST_CASE("sim: skewed routing: the straggler GPU sets the layer time") {
  const double bw = 1e9, lat = 1e-6;
  Case c = decode_case(2, 2, bw, lat);
  c.trace = toy_trace(c.arch, 4, 3, [](int, int) { return std::vector<int>{1}; });  // every token to GPU 1
  // Without contention: GPU 1's vocabulary GEMM overlaps its combine, which would slow both.
  c.options.contention = false;
  const auto r = run(c);
  const double expert = models::grouped_expert_time(c.profile, c.arch, {4}, 1).time;
  CHECK(r.layers[0].token_tail == doctest::Approx(expert).epsilon(1e-9));
  CHECK(r.layers[0].token_avg == doctest::Approx(expert / 2).epsilon(1e-9));
  const double one_way = lat + 2 * 1024 * 2.0 / bw;  // two tokens from rank 0
  const double expected = decode_attention(c, {0, 0}) + one_way + expert + one_way + head(c, 2);
  CHECK(r.step_latency[0] == doctest::Approx(expected).epsilon(1e-9));
  CHECK(r.layers[0].rank_tokens[1] == doctest::Approx(4.0));
  CHECK(r.layers[0].rank_tokens[0] == doctest::Approx(0.0));
}

TEST_CASE("sim: ideal is never slower than overlapped, and has no compute slowdown") {
  Case c = decode_case(4, 8, 50e9, 2e-6);
  c.workload.batch_sequences = 64;
  c.options.steps = 5;
  c.arch = toy_arch(8, 2);
  c.placement = identity_placement(c.arch, 4);
  c.trace = toy_trace(c.arch, 64, 8, [](int s, int t) {
    const int a = (s * 7 + t * 3) % 8;
    return std::vector<int>{a, (a + 1 + s % 3) % 8};
  });
  c.options.layer_chunks = {2};
  c.options.contention = true;
  const auto overlapped = run(c);
  c.options.contention = false;
  const auto ideal = run(c);
  REQUIRE(overlapped.step_latency.size() == ideal.step_latency.size());
  for (std::size_t i = 0; i < ideal.step_latency.size(); ++i) CHECK(ideal.step_latency[i] <= overlapped.step_latency[i]);
  CHECK(ideal.compute_actual == doctest::Approx(ideal.compute_alone).epsilon(1e-12));
  CHECK(overlapped.compute_actual > overlapped.compute_alone);
  CHECK(overlapped.compute_alone == doctest::Approx(ideal.compute_alone).epsilon(1e-12));
}

namespace {

Case synthetic_case(int gpus, double bw, double latency, double compute, double bytes_per_gpu, bool overlap) {
  Case c{toy_arch(2, 1), toy_cluster(gpus, bw, latency), toy_profile(), {}, {}, {}, {}, gpus};
  c.workload.mode = sim::WorkloadMode::kSynthetic;
  c.workload.synthetic_layers = 1;
  c.workload.synthetic_compute = compute;
  c.workload.synthetic_a2a_bytes = bytes_per_gpu;
  c.workload.synthetic_overlap = overlap;
  c.options.steps = 2;
  return c;
}

}  // namespace

TEST_CASE("sim: a compute phase entirely under communication slows by exactly the profile's factor") {
  // 10 us of compute against 1 ms of transfer: the compute is overlapped from start to end.
  Case c = synthetic_case(2, 1e9, 0.0, 10e-6, 2 * 1e9 * 1e-3, true);
  const auto r = run(c);
  CHECK(r.compute_actual / r.compute_alone == doctest::Approx(1.25).epsilon(1e-9));
  c.options.contention = false;
  const auto ideal = run(c);
  CHECK(ideal.compute_actual / ideal.compute_alone == doctest::Approx(1.0).epsilon(1e-12));
}

TEST_CASE("sim: a GEMM overlapping a transfer for half its length slows only for that half") {
  const double compute = 100e-6, bw = 1e9, f_compute = 1.25, f_comm = 1.10;
  // The transfer, slowed by f_comm while the GEMM runs, lasts half the GEMM's length alone.
  const double part = (compute / 2) * bw / f_comm;
  Case c = synthetic_case(2, bw, 0.0, compute, 2 * part, true);
  const auto r = run(c);
  const double overlapped = compute / 2;                                    // under the transfer
  const double expected = overlapped + (compute - overlapped / f_compute);  // the rest at full speed
  // 2 GPUs x 2 phases x 2 steps.
  CHECK(r.compute_actual == doctest::Approx(8 * expected).epsilon(1e-9));
  CHECK(r.compute_alone == doctest::Approx(8 * compute).epsilon(1e-12));
  CHECK(r.step_latency[0] == doctest::Approx(2 * expected).epsilon(1e-9));
}

TEST_CASE("sim: energy is the integral of the profile's power over the states each GPU went through") {
  const double compute = 100e-6, bw = 1e9, lat = 1e-6, bytes = 2 * 1e5;
  Case c = synthetic_case(2, bw, lat, compute, bytes, false);
  const auto r = run(c);
  const double a2a = lat + (bytes / 2) / bw;
  const double step = 2 * compute + 2 * a2a;
  CHECK(r.step_latency[0] == doctest::Approx(step).epsilon(1e-9));
  for (const auto& g : r.gpus) {
    // Per step: computing 2 x compute at 500 W, communicating 2 x a2a at 200 W.
    CHECK(g.energy == doctest::Approx(2 * (500.0 * 2 * compute + 200.0 * 2 * a2a)).epsilon(1e-9));
    CHECK(g.peak_power == doctest::Approx(500.0));
    CHECK(g.compute_busy == doctest::Approx(2 * 2 * compute).epsilon(1e-9));
  }
}

TEST_CASE("sim: a lower power cap lowers power and raises time as the profile says") {
  const double compute = 100e-6;
  Case c = synthetic_case(1, 1e9, 1e-6, compute, 0.0, false);
  const auto free = run(c);
  c.options.power_cap = 350.0;  // half the 700 W limit: speed 0.7 in the profile
  const auto capped = run(c);
  CHECK(free.step_latency[0] == doctest::Approx(2 * compute).epsilon(1e-9));
  CHECK(capped.step_latency[0] == doctest::Approx(2 * compute / 0.7).epsilon(1e-9));
  CHECK(free.gpus[0].peak_power == doctest::Approx(500.0));
  CHECK(capped.gpus[0].peak_power == doctest::Approx(350.0));
  CHECK(capped.gpus[0].energy == doctest::Approx(350.0 * capped.measured_time).epsilon(1e-9));
}

TEST_CASE("sim: hierarchical dispatch sends a token once per destination node") {
  // 2 nodes x 2 GPUs; every token's two experts sit on the two GPUs of the other node.
  Case c{toy_arch(4, 2), toy_cluster(4, 450e9, 1e-6), toy_profile(), {}, {}, {}, {}, 4};
  c.cluster.num_nodes = 2;
  c.cluster.gpus_per_node = 2;
  c.cluster.nics.gpu_nic = {0, 0};
  c.placement = identity_placement(c.arch, 4);  // expert e on GPU e
  c.workload.mode = sim::WorkloadMode::kDecode;
  c.workload.batch_sequences = 4;
  c.options.steps = 2;
  c.options.layer_chunks = {1};
  c.trace = toy_trace(c.arch, 4, 2, [](int s, int) {
    const int home_node = (s % 4) / 2;  // sequence s lives on GPU s % 4
    return home_node == 0 ? std::vector<int>{2, 3} : std::vector<int>{0, 1};
  });
  auto inter_node = [](const sim::SimResult& r) {
    double b = 0;
    for (int a = 0; a < 4; ++a)
      for (int d = 0; d < 4; ++d)
        if (a / 2 != d / 2) b += r.traffic[static_cast<std::size_t>(a)][static_cast<std::size_t>(d)];
    return b;
  };
  c.options.dispatch = sim::DispatchMode::kFlat;
  const auto flat = run(c);
  c.options.dispatch = sim::DispatchMode::kHierarchical;
  const auto hier = run(c);
  const double token = 1024 * 2.0;
  // Flat: each of 4 tokens to 2 GPUs and back, 2 steps. Hierarchical: once per node each way.
  CHECK(inter_node(flat) == doctest::Approx(2 * 4 * 2 * 2 * token));
  CHECK(inter_node(hier) == doctest::Approx(2 * 4 * 1 * 2 * token));
  CHECK(hier.step_latency.size() == 2);

  // Pipelined forwarding: the same bytes in pieces, the NVLink hop of a piece under the inter-node
  // transfer of the next, so the step is shorter than with whole batches; more pieces, shorter still.
  auto total = [](const sim::SimResult& r) {
    double b = 0;
    for (const auto& row : r.traffic)
      for (double x : row) b += x;
    return b;
  };
  // Slow links (a NIC hop as slow as the NVLink hop it feeds), so that bandwidth, not latency, rules
  // and pieces pay: each piece still takes longer to move than a route's latency.
  c.cluster.nics.bandwidth = 0.2e9;
  c.cluster.intra_node.bandwidth = 0.2e9;
  c.options.forward_pieces = 1;
  const auto whole = run(c);
  c.options.forward_pieces = 4;
  const auto four = run(c);
  c.options.forward_pieces = 16;
  const auto sixteen = run(c);
  CHECK(total(four) == doctest::Approx(total(whole)).epsilon(1e-12));
  CHECK(total(sixteen) == doctest::Approx(total(whole)).epsilon(1e-12));
  CHECK(four.step_latency[1] < whole.step_latency[1]);
  CHECK(sixteen.step_latency[1] < four.step_latency[1]);
  // On fast links the same batches are too small to split (a piece would move faster than the
  // route's latency): pieces change nothing.
  c.cluster.nics.bandwidth = c.cluster.intra_node.bandwidth = 450e9;
  c.options.forward_pieces = 1;
  const auto fast_whole = run(c);
  c.options.forward_pieces = 16;
  CHECK(run(c).step_latency[1] == fast_whole.step_latency[1]);
}

TEST_CASE("sim: dense training: ideal <= overlapped <= sequential, and sequential hides nothing") {
  Case c{toy_arch(2, 1), toy_cluster(4, 50e9, 2e-6), toy_profile(), {}, {}, {}, {}, 4};
  c.arch.moe_layers.clear();
  c.arch.num_layers = 4;
  c.arch.dense_ffn_size = 4096;
  c.workload.mode = sim::WorkloadMode::kTraining;
  c.workload.batch = 4;
  c.workload.sequence_length = 256;
  c.workload.micro_batches = 2;
  c.options.steps = 2;
  for (auto gradient : {sim::GradientSync::kAllReduce, sim::GradientSync::kFsdp}) {
    c.workload.gradient = gradient;
    c.options.layer_chunks.assign(4, 1);
    c.options.contention = true;
    const auto sequential = run(c);
    c.options.layer_chunks.assign(4, 2);
    const auto overlapped = run(c);
    c.options.contention = false;
    const auto ideal = run(c);
    CHECK(ideal.measured_time <= overlapped.measured_time);
    CHECK(overlapped.measured_time < sequential.measured_time);
    // Sequential never overlaps collectives with compute: no compute slowdown.
    CHECK(sequential.compute_actual == doctest::Approx(sequential.compute_alone).epsilon(1e-9));
    CHECK(overlapped.compute_actual > overlapped.compute_alone);
    CHECK(sequential.tokens == 2u * 4u * 4u * 256u);
  }
}

TEST_CASE("physics: an FP8 model dispatches FP8 with its scales and combines in BF16") {
  // The same routing with the model's dtype bf16, then fp8: every dispatched token carries hidden x
  // (1 + 4/128) bytes instead of hidden x 2, every combined one hidden x 2 either way.
  testing::SimSetup c = testing::shipped_deepseek_setup(sim::WorkloadMode::kPrefill);
  c.options.steps = 2;
  c.options.warmup_steps = 0;
  auto total = [](const sim::SimResult& r) {
    double sum = 0.0;
    for (const auto& row : r.traffic) sum += std::accumulate(row.begin(), row.end(), 0.0);
    return sum;
  };
  c.arch.dtype = models::Dtype::kBf16;
  const double bf16 = total(testing::simulate_setup(c, c.options));
  c.arch.dtype = models::Dtype::kFp8;
  const double fp8 = total(testing::simulate_setup(c, c.options));
  REQUIRE(bf16 > 0.0);
  CHECK(fp8 / bf16 == doctest::Approx((1.0 + 4.0 / 128.0 + 2.0) / (2.0 + 2.0)).epsilon(1e-12));
  CHECK(models::dispatch_element_bytes(models::Dtype::kFp8) == 1.0 + 4.0 / 128.0);
  CHECK(models::combine_element_bytes(models::Dtype::kFp8) == 2.0);
  CHECK(models::dispatch_element_bytes(models::Dtype::kBf16) == 2.0);
  CHECK(models::combine_element_bytes(models::Dtype::kBf16) == 2.0);
}
