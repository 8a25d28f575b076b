#include "models/costs.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "models/architecture.hpp"
#include "models/profile.hpp"
#include "tests/support/test_support.hpp"

using namespace moesim::models;

namespace {

const Profile& tiny() {
  static const Profile p = load_profile((moesim::testing::test_data_dir() / "profiles" / "tiny.yaml").string());
  return p;
}

bool close(double a, double b, double rel = 1e-9) {
  return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b));
}

// Shapes that tiny.yaml tabulates: hidden 1024, expert FFN 4096 -> (4096, 1024) and (1024, 4096).
Architecture moe_arch() {
  Architecture a;
  a.name = "test-moe";
  a.num_layers = 2;
  a.moe_layers = {0, 1};
  a.hidden_size = 1024;
  a.num_experts = 8;
  a.expert_ffn_size = 4096;
  a.top_k = 2;
  a.activation = "swiglu";
  a.ffn_projections = 3;
  a.attention.kind = "mha";
  a.attention.num_heads = 8;
  a.attention.num_kv_heads = 8;
  a.attention.head_dim = 128;
  a.vocab_size = 1000;
  a.dtype = Dtype::kBf16;
  return a;
}

// moe_arch() with MLA attention: `heads` heads, DeepSeek's latent sizes (kv_lora 512, nope 128,
// rope 64, v 128), a query LoRA of `q_lora` (0: none).
Architecture mla_arch(int heads, int q_lora) {
  Architecture a = moe_arch();
  a.attention = {};
  a.attention.kind = "mla";
  a.attention.num_heads = heads;
  a.attention.num_kv_heads = heads;
  a.attention.q_lora_rank = q_lora;
  a.attention.kv_lora_rank = 512;
  a.attention.qk_nope_head_dim = 128;
  a.attention.qk_rope_head_dim = 64;
  a.attention.v_head_dim = 128;
  return a;
}

double table_time(long n, long k, std::size_t i) {
  for (const auto& c : tiny().gemm_table(Dtype::kBf16)->curves)
    if (c.n == n && c.k == k) return c.time[i];
  FAIL("shape not in tiny.yaml");
  return 0.0;
}

}  // namespace

TEST_CASE("interpolate_loglog: exact at the points, log-log between, the stated rule outside") {
  const std::vector<double> x{1, 10, 100, 1000};
  const std::vector<double> y{5, 5, 20, 400};
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(interpolate_loglog(x, y, x[i]) == y[i]);
  // Between points: a straight line in log-log, so the geometric mean of x gives that of y.
  CHECK(close(interpolate_loglog(x, y, std::sqrt(10.0 * 100.0)), std::sqrt(5.0 * 20.0)));
  CHECK(close(interpolate_loglog(x, y, std::sqrt(100.0 * 1000.0)), std::sqrt(20.0 * 400.0)));
  // Below the smallest size: the smallest point's value (a launch-bound floor).
  CHECK(interpolate_loglog(x, y, 0.25) == 5.0);
  CHECK(interpolate_loglog(x, y, 0.0) == 5.0);
  // Above the largest: the largest point's throughput, time linear in the work.
  CHECK(close(interpolate_loglog(x, y, 4000.0), 1600.0));
  CHECK(close(interpolate_loglog(x, y, 1e6), 400.0 * 1000.0));
  // Monotone over a dense sweep across and beyond the range.
  double previous = 0.0;
  for (double at = 0.1; at < 1e5; at *= 1.07) {
    const double v = interpolate_loglog(x, y, at);
    CHECK(v >= previous);
    previous = v;
  }
  CHECK_THROWS_AS(interpolate_loglog({}, {}, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(interpolate_loglog({1, 2}, {1}, 1.0), std::invalid_argument);
}

TEST_CASE("gemm_time: table points, between them, untabulated shapes, missing dtypes") {
  const Profile& p = tiny();
  const std::vector<double> m{1, 16, 256, 4096};
  for (std::size_t i = 0; i < m.size(); ++i) {
    CHECK(gemm_time(p, Dtype::kBf16, m[i], 4096, 1024) == table_time(4096, 1024, i));
    CHECK(gemm_time(p, Dtype::kBf16, m[i], 1024, 1024) == table_time(1024, 1024, i));
  }
  // Between m = 16 and 256 (times 16 and 50 us): log-log, so m = 64 gives sqrt(16 * 50) us.
  CHECK(close(gemm_time(p, Dtype::kBf16, 64, 4096, 1024), std::sqrt(16.0 * 50.0) * 1e-6));
  // Beyond the table: linear in m.
  CHECK(close(gemm_time(p, Dtype::kBf16, 8192, 4096, 1024), 2.0 * table_time(4096, 1024, 3)));
  CHECK(gemm_time(p, Dtype::kBf16, 0, 4096, 1024) == 0.0);
  double previous = 0.0;
  for (double tokens = 1; tokens <= 65536; tokens *= 1.5) {
    const double t = gemm_time(p, Dtype::kBf16, tokens, 4096, 1024);
    CHECK(t >= previous);
    previous = t;
  }

  // (1024, 1536) is not tabulated; the nearest by n*k is (1024, 1024): its time above the 2 us
  // launch floor grows with the work, 1.5x.
  const double floor = p.gemm_table(Dtype::kBf16)->launch_floor;
  for (std::size_t i = 0; i < m.size(); ++i)
    CHECK(close(gemm_time(p, Dtype::kBf16, m[i], 1024, 1536), floor + (table_time(1024, 1024, i) - floor) * 1.5));
  // Far from every shape, still scaled from the nearest (the largest here).
  CHECK(close(gemm_time(p, Dtype::kBf16, 4096, 8192, 8192), floor + (table_time(4096, 1024, 3) - floor) * 16.0));

  const std::string missing = [&] {
    try {
      gemm_time(p, Dtype::kFp8, 16, 1024, 1024);
    } catch (const moesim::common::InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  CHECK(missing.find("no GEMM table for dtype fp8; it has bf16") != std::string::npos);
  CHECK(gemm_flops(2, 3, 4) == 48.0);
}

TEST_CASE("grouped_expert_time: one expert is the sum of its projection GEMMs - a group shares launches") {
  const Profile& p = tiny();
  const Architecture a = moe_arch();
  const double floor = p.gemm_table(Dtype::kBf16)->launch_floor;
  REQUIRE(floor > 0.0);
  for (const long tokens : {1L, 16L, 100L, 4096L}) {
    CAPTURE(tokens);
    const auto t = static_cast<double>(tokens);
    const double single = 2.0 * gemm_time(p, Dtype::kBf16, t, 4096, 1024) + gemm_time(p, Dtype::kBf16, t, 1024, 4096);
    const ExpertWork w = grouped_expert_time(p, a, {tokens}, 1);
    CHECK(close(w.time, single));
    CHECK(w.flops == 3.0 * gemm_flops(t, 4096, 1024));
  }
  // Four experts in one group: the three launch floors are paid once, not four times.
  const std::vector<long> tokens{16, 256, 0, 4096, 1};
  double alone = 0.0;
  for (const long t : tokens) alone += grouped_expert_time(p, a, {t}, 1).time;
  CHECK(close(grouped_expert_time(p, a, tokens, 1).time, alone - 3.0 * 3.0 * floor));
  CHECK(grouped_expert_time(p, a, {0, 0}, 1).time == 0.0);
  CHECK(grouped_expert_time(p, a, {}, 1).flops == 0.0);
  // TP 4: each GPU holds a quarter of the FFN: (1024, 1024) for all three projections.
  CHECK(close(grouped_expert_time(p, a, {256}, 4).time, 3.0 * gemm_time(p, Dtype::kBf16, 256, 1024, 1024)));
  // GELU: two projections.
  Architecture gelu = a;
  gelu.activation = "gelu";
  gelu.ffn_projections = 2;
  CHECK(close(grouped_expert_time(p, gelu, {256}, 1).time,
              gemm_time(p, Dtype::kBf16, 256, 4096, 1024) + gemm_time(p, Dtype::kBf16, 256, 1024, 4096)));
  CHECK(close(dense_ffn_time(p, gelu, 256, 4096, 1).time, grouped_expert_time(p, gelu, {256}, 1).time));
  CHECK_THROWS_AS(grouped_expert_time(p, a, {-1}, 1), std::invalid_argument);
}

TEST_CASE("attention: projections plus a core quadratic in prefill and linear in decode context") {
  const Profile& p = tiny();
  const Architecture a = moe_arch();
  const double floor = p.gemm_table(Dtype::kBf16)->launch_floor;
  auto core = [&](long n, long c) { return attention_core_time(p, a, {{n}, {c}}, 1); };

  // Prefill (no context): pairs = L (L + 1) / 2, compute-bound here: doubling L quadruples the core.
  const double t1 = core(2048, 0).time - floor;
  const double t2 = core(4096, 0).time - floor;
  CHECK(t2 / t1 == doctest::Approx(4.0).epsilon(0.01));
  // FLOP: pairs * heads * 4 * head_dim.
  CHECK(core(2048, 0).flops == 2048.0 * 2049.0 / 2.0 * 8 * 4 * 128);
  CHECK(t1 == doctest::Approx(core(2048, 0).flops / (p.gemm_table(Dtype::kBf16)->peak_flops * 0.5)));
  // Decode (one new token): reads the KV cache, linear in its length.
  const double d1 = core(1, 100000).time - floor;
  const double d2 = core(1, 200000).time - floor;
  const double d3 = core(1, 300000).time - floor;
  CHECK(d2 / d1 == doctest::Approx(2.0).epsilon(0.01));
  CHECK(d3 - d2 == doctest::Approx(d2 - d1).epsilon(0.01));
  // Decode is memory-bound: bytes = (c + 1) * 2 * kv * d * 2 + q and o.
  CHECK(d1 == doctest::Approx((100001.0 * 2 * 8 * 128 * 2 + 8 * 256 * 2) / p.device.hbm_bandwidth));
  CHECK(core(0, 1000).time == 0.0);

  // The whole attention: core plus the fused QKV and O projections over the step's new tokens.
  const AttentionBatch batch{{100, 1, 1}, {0, 500, 2000}};
  const double proj =
      gemm_time(p, Dtype::kBf16, 102, 3 * 8 * 128, 1024) + gemm_time(p, Dtype::kBf16, 102, 1024, 8 * 128);
  CHECK(close(attention_time(p, a, batch, 1).time, attention_core_time(p, a, batch, 1).time + proj));
  // TP 2 halves the heads on each GPU.
  CHECK(attention_core_time(p, a, batch, 2).flops == doctest::Approx(attention_core_time(p, a, batch, 1).flops / 2));
  CHECK_THROWS_AS(attention_time(p, a, {{1, 2}, {0}}, 1), std::invalid_argument);

  // MLA: decode attends in the latent space (weights absorbed), prefill with expanded heads.
  const Architecture mla = mla_arch(16, 0);
  CHECK(attention_core_time(p, mla, {{1}, {999}}, 1).flops == 1000.0 * 16 * (2.0 * (512 + 64) + 2.0 * 512));
  CHECK(attention_core_time(p, mla, {{10}, {0}}, 1).flops == 55.0 * 16 * (2.0 * (128 + 64) + 2.0 * 128));
  CHECK(attention_time(p, mla, {{10}, {0}}, 1).time > attention_core_time(p, mla, {{10}, {0}}, 1).time);
}

TEST_CASE("grouped_gemm_time: a persistent kernel is the GEMM of all rows plus every further group's weights") {
  Profile p = tiny();
  GemmTable& table = p.gemm.front();
  REQUIRE(table.dtype == Dtype::kBf16);
  const double floor = table.launch_floor;
  // Launches (the default): each group's GEMM, the floor once.
  const std::vector<double> rows{16, 0, 256, 1};
  double sum = 0.0;
  for (const double m : rows)
    if (m > 0) sum += gemm_time(p, Dtype::kBf16, m, 4096, 1024) - floor;
  CHECK(close(grouped_gemm_time(p, Dtype::kBf16, rows, 4096, 1024), sum + floor));
  // Persistent: 273 rows as one GEMM, and two more weight matrices (4096 x 1024 bf16) from HBM.
  table.grouped = GroupedGemm::kPersistent;
  const double weights = 2.0 * 4096 * 1024 / p.device.hbm_bandwidth;
  CHECK(close(grouped_gemm_time(p, Dtype::kBf16, rows, 4096, 1024), gemm_time(p, Dtype::kBf16, 273, 4096, 1024) + 2.0 * weights));
  // One group is one GEMM under either rule; no rows cost nothing.
  CHECK(close(grouped_gemm_time(p, Dtype::kBf16, {300}, 4096, 1024), gemm_time(p, Dtype::kBf16, 300, 4096, 1024)));
  CHECK(grouped_gemm_time(p, Dtype::kBf16, {0, 0}, 4096, 1024) == 0.0);
  CHECK_THROWS_AS(grouped_gemm_time(p, Dtype::kBf16, {-1}, 4096, 1024), std::invalid_argument);
  // The experts' layer follows its table's rule: flops and bytes do not depend on it.
  const Architecture a = moe_arch();
  const ExpertWork w = grouped_expert_time(p, a, {16, 256, 0, 1}, 1);
  CHECK(close(w.time, 2.0 * grouped_gemm_time(p, Dtype::kBf16, rows, 4096, 1024) +
                          grouped_gemm_time(p, Dtype::kBf16, rows, 1024, 4096)));
  table.grouped = GroupedGemm::kLaunches;
  const ExpertWork l = grouped_expert_time(p, a, {16, 256, 0, 1}, 1);
  CHECK(w.flops == l.flops);
  CHECK(w.bytes == l.bytes);
}

TEST_CASE("gemm_shapes: MLA with a query down-projection fuses it with the KV's, as serving engines do") {
  Architecture a = mla_arch(128, 1536);
  a.hidden_size = 7168;
  const auto shapes = gemm_shapes(a, 1);
  auto has = [&](long n, long k) { return std::find(shapes.begin(), shapes.end(), GemmShape{n, k}) != shapes.end(); };
  CHECK(has(2112, 7168));   // q_a + kv_a + rope: DeepSeek-V3's 2112 x 7168 (DeepGEMM's benchmark shape)
  CHECK(!has(1536, 7168));  // not run separately
  CHECK(!has(576, 7168));
  CHECK(has(128 * 192, 1536));  // q_b
  a.attention.q_lora_rank = 0;  // no query compression (DeepSeek-V2-Lite): q and kv_a stay apart
  const auto lite = gemm_shapes(a, 1);
  CHECK(std::find(lite.begin(), lite.end(), GemmShape{128 * 192, 7168}) != lite.end());
  CHECK(std::find(lite.begin(), lite.end(), GemmShape{576, 7168}) != lite.end());
}

TEST_CASE("gemm_shapes: every projection an architecture asks for") {
  Architecture a = moe_arch();
  a.num_shared_experts = 2;
  a.shared_expert_ffn_size = 512;
  const auto shapes = gemm_shapes(a, 2);
  auto has = [&](long n, long k) { return std::find(shapes.begin(), shapes.end(), GemmShape{n, k}) != shapes.end(); };
  CHECK(has(2048, 1024));         // expert gate/up, FFN 4096 / tp 2
  CHECK(has(1024, 2048));         // expert down
  CHECK(has(256, 1024));          // one shared expert's shard
  CHECK(has(512, 1024));          // both shared experts fused
  CHECK(has(3 * 4 * 128, 1024));  // QKV of 4 heads per GPU
  CHECK(has(1024, 4 * 128));      // O
  CHECK(has(500, 1024));          // LM head shard
  CHECK(std::is_sorted(shapes.begin(), shapes.end()));
  CHECK(std::adjacent_find(shapes.begin(), shapes.end()) == shapes.end());
}

TEST_CASE("collective_time: table busbw at table points, rank scaling, ring fallback") {
  const Profile& p = tiny();
  const auto& ar = p.collectives[0];
  const std::vector<double> busbw{0.1e9, 50e9, 200e9};
  for (std::size_t i = 0; i < ar.bytes.size(); ++i) {
    const double t = collective_time(p, CollectiveOp::kAllReduce, 8, ar.bytes[i], 0, 0);
    CHECK(close(ar.bytes[i] * busbw_factor(CollectiveOp::kAllReduce, 8) / t, busbw[i]));
  }
  // Between points: monotone in bytes.
  double previous = 0.0;
  for (double b = 512; b < 4e9; b *= 1.3) {
    const double t = collective_time(p, CollectiveOp::kAllReduce, 8, b, 0, 0);
    CHECK(t >= previous);
    previous = t;
  }
  // 4 ranks, no curve: the 8-rank curve's bus bandwidth with the 4-rank factor.
  CHECK(close(collective_time(p, CollectiveOp::kAllReduce, 4, 1048576, 0, 0),
              collective_time(p, CollectiveOp::kAllReduce, 8, 1048576, 0, 0) *
                  busbw_factor(CollectiveOp::kAllReduce, 4) / busbw_factor(CollectiveOp::kAllReduce, 8)));
  // send/recv given as algbw: time = bytes / algbw.
  CHECK(close(collective_time(p, CollectiveOp::kSendRecv, 2, 1073741824.0, 0, 0), 1073741824.0 / 100e9));
  // No all_gather curve: a ring over the link, (n - 1) latencies plus bytes (n - 1)/n over the bandwidth.
  CHECK(close(collective_time(p, CollectiveOp::kAllGather, 8, 8e6, 100e9, 2e-6), 7 * 2e-6 + 8e6 * 7.0 / 8.0 / 100e9));
  CHECK(close(collective_time(p, CollectiveOp::kAllReduce, 1, 8e6, 100e9, 2e-6), 0.0));
  CHECK_THROWS_AS(collective_time(p, CollectiveOp::kAllGather, 8, 8e6, 0, 0), std::invalid_argument);
  CHECK_THROWS_AS(busbw_factor(CollectiveOp::kAllGather, 0), std::invalid_argument);

  CHECK(busbw_factor(CollectiveOp::kAllReduce, 8) == 1.75);
  CHECK(busbw_factor(CollectiveOp::kAllGather, 4) == 0.75);
  CHECK(busbw_factor(CollectiveOp::kReduceScatter, 2) == 0.5);
  CHECK(busbw_factor(CollectiveOp::kAllToAll, 8) == 0.875);
  CHECK(busbw_factor(CollectiveOp::kSendRecv, 2) == 1.0);
}

TEST_CASE("collective_time: the shipped H100 profile reproduces Azure's all-reduce busbw") {
  const Profile h100 = load_profile("h100-sxm");
  const double bytes = 8589934592.0;  // 8G
  CHECK(bytes * 1.75 / collective_time(h100, CollectiveOp::kAllReduce, 8, bytes, 0, 0) ==
        doctest::Approx(478.87e9).epsilon(1e-5));
  // 1M: 43.70 published, faster than 512K's time: pooled with it by the monotone fit, within 2%.
  const double mib = 1048576.0;
  CHECK(mib * 1.75 / collective_time(h100, CollectiveOp::kAllReduce, 8, mib, 0, 0) ==
        doctest::Approx(43.7e9).epsilon(0.02));
  // All-gather at the largest size: the 370 GB/s busbw of gpus.md.
  CHECK(bytes * 0.875 / collective_time(h100, CollectiveOp::kAllGather, 8, bytes, 0, 0) ==
        doctest::Approx(370e9).epsilon(1e-5));
}

TEST_CASE("contention: exact at grid points, log-linear between, clamped outside, fallbacks") {
  const Profile& p = tiny();
  const Slowdown at = contention(p, CollectiveOp::kAllToAll, 1e8, 1e9);
  CHECK(at.compute == 1.5);
  CHECK(at.comm == 1.3);
  CHECK(contention(p, CollectiveOp::kAllToAll, 1e6, 1e11).compute == 1.05);
  // Halfway in log bytes (1e7) at 1e9 FLOP: halfway between 1.1 and 1.5.
  CHECK(close(contention(p, CollectiveOp::kAllToAll, 1e7, 1e9).compute, 1.3));
  // The centre of the cell: the mean of the four corners.
  CHECK(close(contention(p, CollectiveOp::kAllToAll, 1e7, 1e10).compute, (1.1 + 1.05 + 1.5 + 1.2) / 4));
  CHECK(close(contention(p, CollectiveOp::kAllToAll, 1e7, 1e10).comm, (1.0 + 1.0 + 1.3 + 1.1) / 4));
  // Outside the grid: clamped to its edge.
  CHECK(contention(p, CollectiveOp::kAllToAll, 1e12, 1e3).compute == 1.5);
  CHECK(contention(p, CollectiveOp::kAllToAll, 10, 1e15).compute == 1.05);
  // An op without a grid takes "any"; no overlap, no slowdown.
  CHECK(contention(p, CollectiveOp::kAllGather, 5e6, 1e10).compute == 1.2);
  CHECK(contention(p, CollectiveOp::kAllGather, 5e6, 1e10).comm == 1.1);
  CHECK(contention(p, CollectiveOp::kAllToAll, 0, 1e10).compute == 1.0);
  Profile none = p;
  none.contention = {};
  CHECK(contention(none, CollectiveOp::kAllToAll, 1e8, 1e9).compute == 1.0);
  CHECK(contention(none, CollectiveOp::kAllToAll, 1e8, 1e9).comm == 1.0);
  // Slowdowns never below 1, anywhere.
  for (double b = 1e3; b < 1e10; b *= 3.7)
    for (double f = 1e6; f < 1e13; f *= 5.3) {
      const Slowdown s = contention(p, CollectiveOp::kAllToAll, b, f);
      CHECK(s.compute >= 1.0);
      CHECK(s.comm >= 1.0);
    }
}

TEST_CASE("power by kernel class: memory-bound kernels draw their own figure, and a cap slows them by it") {
  Profile p = tiny();
  CHECK(kernel_power(p, Dtype::kBf16, ComputeClass::kComputeBound) == 400.0);
  CHECK(kernel_power(p, Dtype::kBf16, ComputeClass::kMemoryBound) == 400.0);  // no figure: the compute one
  CHECK(kernel_power_with_comm(p, Dtype::kBf16, 400.0) == 480.0);            // the overlapped figure
  p.power.memory_bound[Dtype::kBf16] = 250.0;
  CHECK(kernel_power(p, Dtype::kBf16, ComputeClass::kMemoryBound) == 250.0);
  CHECK(kernel_power(p, Dtype::kBf16, ComputeClass::kComputeBound) == 400.0);
  CHECK(kernel_power_with_comm(p, Dtype::kBf16, 250.0) == 350.0);  // + communication - idle
  // The cap curve is that of work drawing the compute figure; work drawing less is slowed less.
  CHECK(cap_speed_factor(p, 300, Dtype::kBf16, 400.0) == cap_speed_factor(p, 300));
  CHECK(close(cap_speed_factor(p, 300, Dtype::kBf16, 250.0), cap_speed_factor(p, 480)));
  CHECK(cap_speed_factor(p, 300, Dtype::kBf16, 250.0) > cap_speed_factor(p, 300));
  CHECK(cap_speed_factor(p, 0, Dtype::kBf16, 250.0) == 1.0);
  double speed = 0.0;
  for (double w = 400.0; w >= 60.0; w -= 20.0) {
    const double s = cap_speed_factor(p, 200, Dtype::kBf16, w);
    CHECK(s >= speed);
    CHECK(s <= 1.0);
    speed = s;
  }
}

TEST_CASE("power: states, caps and clock limits - speed and power monotone in the cap") {
  const Profile& p = tiny();
  CHECK(state_power(p, GpuState::kIdle, Dtype::kBf16, 0) == 50.0);
  CHECK(state_power(p, GpuState::kCompute, Dtype::kBf16, 0) == 400.0);
  CHECK(state_power(p, GpuState::kComm, Dtype::kBf16, 0) == 150.0);
  CHECK(state_power(p, GpuState::kBoth, Dtype::kBf16, 0) == 480.0);
  CHECK(state_power(p, GpuState::kCompute, Dtype::kBf16, 300) == 300.0);  // never above the cap
  CHECK(state_power(p, GpuState::kIdle, Dtype::kBf16, 300) == 50.0);
  CHECK(state_power(p, GpuState::kCompute, Dtype::kFp16, 0) == 400.0);  // no fp16 figure: the highest listed

  CHECK(cap_speed_factor(p, 0) == 1.0);
  CHECK(cap_speed_factor(p, 500) == 1.0);
  CHECK(cap_speed_factor(p, 600) == 1.0);
  CHECK(close(cap_speed_factor(p, 300), 0.75));             // the point at 0.6
  CHECK(close(cap_speed_factor(p, 350), 0.825));            // halfway to 0.8 -> 0.9
  CHECK(close(cap_speed_factor(p, 100), 0.5 * 0.2 / 0.4));  // below the curve: proportional to the cap
  double speed = 0.0;
  double power = 0.0;
  for (double cap = 10; cap <= 700; cap += 7) {
    const double s = cap_speed_factor(p, cap);
    const double w = state_power(p, GpuState::kBoth, Dtype::kBf16, cap);
    CHECK(s >= speed);
    CHECK(w >= power);
    CHECK(s <= 1.0);
    CHECK(w <= cap);
    speed = s;
    power = w;
  }

  CHECK(clock_speed_factor(p, 0) == 1.0);
  CHECK(close(clock_speed_factor(p, 750e6), 0.8));
  CHECK(close(clock_power_factor(p, 750e6), 0.7));
  CHECK(close(clock_speed_factor(p, 250e6), 0.55 * 0.5));  // below the curve: proportional to the clock
  CHECK(close(clock_power_factor(p, 250e6), 0.5));         // static power stays
  CHECK(clock_speed_factor(p, 2e9) == 1.0);
}

TEST_CASE("power: the shipped profiles' cap curves and states are consistent") {
  for (const std::string name : {"h100-sxm", "h200", "a100-sxm"}) {
    CAPTURE(name);
    const Profile p = load_profile(name);
    CHECK(p.power.idle < p.power.communication);
    CHECK(p.power.communication < state_power(p, GpuState::kCompute, Dtype::kBf16, 0));
    CHECK(state_power(p, GpuState::kBoth, Dtype::kBf16, 0) <= p.power.max_power);
    CHECK(cap_speed_factor(p, p.power.max_power * 0.5) < 1.0);
    CHECK(cap_speed_factor(p, p.power.max_power * 0.5) > cap_speed_factor(p, p.power.min_power_limit));
    CHECK(clock_speed_factor(p, p.device.sm_clock * 0.7) < 1.0);
    CHECK(clock_power_factor(p, p.device.sm_clock * 0.7) < clock_speed_factor(p, p.device.sm_clock * 0.7));
  }
}

TEST_CASE("dtype_bytes") {
  CHECK(dtype_bytes(Dtype::kBf16) == 2.0);
  CHECK(dtype_bytes(Dtype::kFp16) == 2.0);
  CHECK(dtype_bytes(Dtype::kFp8) == 1.0);
  CHECK(dtype_bytes(Dtype::kFp32) == 4.0);
  CHECK(dtype_bytes(Dtype::kTf32) == 4.0);
}

TEST_CASE("contention: the compute class and the communication's SMs choose the grid, SMs interpolate, none slows nothing") {
  Profile p;
  p.name = "grids";
  p.contention.provenance.kind = SourceKind::kModel;
  p.contention.comm_sms = 10;
  auto grid = [&](std::optional<CollectiveOp> op, std::optional<ComputeClass> cls, int sms, double f) {
    p.contention.points.push_back({op, cls, sms, 1e6, 1e9, f, 1.0 + (f - 1.0) / 2.0});
  };
  grid(std::nullopt, ComputeClass::kComputeBound, 10, 1.1);
  grid(std::nullopt, ComputeClass::kComputeBound, 30, 1.3);
  grid(std::nullopt, ComputeClass::kMemoryBound, -1, 1.5);
  grid(CollectiveOp::kAllToAll, std::nullopt, -1, 2.0);
  auto f = [&](CollectiveOp op, ComputeClass cls, int sms) {
    return contention(p, ContentionQuery{op, 1e6, 1e9, cls, sms}).compute;
  };
  CHECK(close(f(CollectiveOp::kAllGather, ComputeClass::kComputeBound, 20), 1.2));  // between 10 and 30 SMs
  CHECK(close(f(CollectiveOp::kAllGather, ComputeClass::kComputeBound, 30), 1.3));
  CHECK(close(f(CollectiveOp::kAllGather, ComputeClass::kComputeBound, 50), 1.3));  // nearest count
  CHECK(close(f(CollectiveOp::kAllGather, ComputeClass::kComputeBound, -1), 1.1));  // the profile's 10 SMs
  CHECK(close(f(CollectiveOp::kAllGather, ComputeClass::kMemoryBound, 20), 1.5));   // its class, any SMs
  CHECK(f(CollectiveOp::kAllGather, ComputeClass::kComputeBound, 0) == 1.0);        // no SM held, no grid for 0
  CHECK(close(f(CollectiveOp::kAllToAll, ComputeClass::kComputeBound, 20), 2.0));    // the op's own grid first
  CHECK(close(contention(p, ContentionQuery{CollectiveOp::kAllGather, 1e6, 1e9, ComputeClass::kComputeBound, 20}).comm,
              1.1));
  // A grid for 0 SMs (a measured copy engine) is used when there is one.
  grid(std::nullopt, ComputeClass::kComputeBound, 0, 1.02);
  CHECK(close(f(CollectiveOp::kAllGather, ComputeClass::kComputeBound, 0), 1.02));
  CHECK(close(f(CollectiveOp::kAllGather, ComputeClass::kComputeBound, 5), 1.06));  // between 0 and 10
}

TEST_CASE("compute_class: the roofline ridge splits memory- from compute-bound; decode GEMMs are memory-bound") {
  const Profile h100 = load_profile("h100-sxm");
  const Architecture v2 = load_architecture("deepseek-v2-lite");
  const ExpertWork decode = grouped_expert_time(h100, v2, {2, 1, 3}, 1);
  const ExpertWork prefill = grouped_expert_time(h100, v2, {4096, 2048}, 1);
  CHECK(decode.bytes > 0.0);
  CHECK(compute_class(h100, v2.dtype, decode.flops, decode.bytes) == ComputeClass::kMemoryBound);
  CHECK(compute_class(h100, v2.dtype, prefill.flops, prefill.bytes) == ComputeClass::kComputeBound);
  // The ridge itself: peak FLOP/s over HBM bytes/s.
  const double ridge = h100.gemm_table(Dtype::kBf16)->peak_flops / h100.device.hbm_bandwidth;
  CHECK(compute_class(h100, Dtype::kBf16, ridge * 0.99, 1.0) == ComputeClass::kMemoryBound);
  CHECK(compute_class(h100, Dtype::kBf16, ridge * 1.01, 1.0) == ComputeClass::kComputeBound);
  // The shipped model: S / (S - s) for compute-bound kernels at the profile's 20 SMs (132 SMs).
  const Slowdown s = contention(h100, ContentionQuery{CollectiveOp::kAllGather, 1e8, 1e12, ComputeClass::kComputeBound, -1});
  CHECK(s.compute == doctest::Approx(132.0 / 112.0).epsilon(1e-4));
}

TEST_CASE("elementwise: norms, activations, quantisation and permutation bytes, at HBM speed after a floor each") {
  const Architecture v3 = load_architecture("deepseek-v3");  // FP8, hidden 7168, expert FFN 2048, SwiGLU
  const double h = 7168.0;
  const double q = 1.0 + 4.0 / 128.0;  // an FP8 element with its scale
  // Two residual adds + RMSNorms (read x and the residual, write both, in BF16) and the quantisation
  // of both normed inputs (read BF16, write FP8), per token.
  const Elementwise layer = layer_elementwise(v3, 10.0);
  CHECK(layer.kernels == 4);
  CHECK(close(layer.bytes, 10.0 * (2 * 4 * 2 * h + 2 * (2 + q) * h)));
  // SwiGLU reads gate and up (BF16) and writes the product in FP8 for the down projection; TP shards it.
  const Elementwise act = activation_elementwise(v3, 3.0, 2048, 2);
  CHECK(act.kernels == 1);
  CHECK(close(act.bytes, 3.0 * (2 * 2 * 1024 + q * 1024)));
  // Rows into expert order (dispatched FP8) and back (BF16), each read and written.
  CHECK(close(permute_elementwise(v3, 5.0).bytes, 5.0 * 2 * (q + 2) * h));
  CHECK(close(moe_sum_elementwise(v3, 2.0).bytes, 2.0 * 3 * 2 * h));
  // A BF16 model quantises nothing; GELU reads one projection's output.
  Architecture bf16 = v3;
  bf16.dtype = Dtype::kBf16;
  bf16.ffn_projections = 2;
  CHECK(layer_elementwise(bf16, 1.0).kernels == 2);
  CHECK(close(activation_elementwise(bf16, 1.0, 2048, 1).bytes, 2 * 2048 + 2 * 2048));

  // Time: kernels x launch floor + bytes / hbm_bandwidth; nothing where the profile has no section.
  Profile p = tiny();
  CHECK(elementwise_time(p, layer).time == 0.0);
  p.elementwise.launch_floor = 2e-6;
  p.elementwise.provenance = {SourceKind::kModel, "test"};
  const ExpertWork w = elementwise_time(p, layer);
  CHECK(close(w.time, 4 * 2e-6 + layer.bytes / 1000e9));
  CHECK(close(w.bytes, layer.bytes));
  CHECK(w.flops == 0.0);
  // The shipped profiles have the section: the smallest GEMM launch floor.
  for (const char* name : {"h100-sxm", "h200", "h800", "a100-sxm"}) {
    CAPTURE(name);
    const Profile shipped = load_profile(name);
    REQUIRE(has_source(shipped.elementwise.provenance));
    double floor = 1.0;
    for (const auto& t : shipped.gemm) floor = std::min(floor, t.launch_floor);
    CHECK(close(shipped.elementwise.launch_floor, floor, 1e-3));
  }
}
