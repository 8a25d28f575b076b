// moesim-calibrate's command flow with a fake device: measure -> profile, refusals before any GPU
// work, the no-GPU and interrupted paths leaving no file, and `validate`'s predictions (alone, under
// traffic, and as two micro-batches: the fake device's concurrent runs and the sharing rule).
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "calibrate/cli.hpp"
#include "calibrate/validate.hpp"
#include "calibrate/fake_device.hpp"
#include "calibrate/stats.hpp"
#include "models/architecture.hpp"
#include "models/costs.hpp"
#include "models/profile.hpp"
#include "tests/support/test_support.hpp"
#include "traces/trace.hpp"

namespace mc = moesim::calibrate;
using moesim::calibrate::FakeDevice;

namespace {

struct Run {
  int code = -1;
  std::string out, err;
  int opened = 0;
};

Run run(const std::vector<std::string>& args, bool gpu = true, bool interrupted = false) {
  Run r;
  mc::CliEnvironment env;
  env.open_device = [&](const mc::DeviceRequest& req) -> std::unique_ptr<mc::Device> {
    ++r.opened;
    if (!gpu) throw mc::NoGpuError("CUDA driver version is insufficient for CUDA runtime version");
    return std::make_unique<FakeDevice>(req.gpus);
  };
  env.list_devices = [gpu]() -> std::vector<std::string> {
    if (!gpu) throw mc::NoGpuError("no CUDA-capable device is detected");
    return {"GPU 0: NVIDIA H200 (fake)"};
  };
  env.interrupted = [interrupted] { return interrupted; };
  std::ostringstream out, err;
  r.code = mc::calibrate_main(args, out, err, env);
  r.out = out.str();
  r.err = err.str();
  return r;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A routing trace for mixtral-8x7b with skewed, deterministic routing.
void write_trace(const std::filesystem::path& path, int tokens) {
  const moesim::models::Architecture a = moesim::models::load_architecture("mixtral-8x7b");
  moesim::traces::TraceMeta meta;
  meta.shape.architecture = "mixtral-8x7b";
  meta.shape.layers = a.moe_layers;
  meta.shape.num_experts = a.num_experts;
  meta.shape.top_k = a.top_k;
  meta.source = "calibrate test";
  auto w = moesim::traces::create_trace_writer(path.string(), meta, moesim::traces::Encoding::kBinary, false);
  moesim::traces::TokenBlock b;
  unsigned x = 12345;
  for (int t = 0; t < tokens; ++t) {
    b.sequence.push_back(static_cast<std::uint32_t>(t / 100));
    b.position.push_back(static_cast<std::uint32_t>(t % 100));
    for (std::size_t l = 0; l < a.moe_layers.size(); ++l) {
      x = x * 1103515245u + 12345u;
      const int first = static_cast<int>((x >> 16) % 100) < 40 ? 0 : static_cast<int>((x >> 8) % a.num_experts);
      const int second = (first + 1 + static_cast<int>((x >> 20) % (a.num_experts - 1))) % a.num_experts;
      b.experts.push_back(static_cast<std::uint16_t>(first));
      b.experts.push_back(static_cast<std::uint16_t>(second));
    }
  }
  w->write(b);
  w->finish();
}

}  // namespace

TEST_CASE("calibrate cli: a measurement run writes a loadable profile and its raw JSON") {
  moesim::testing::TempDir dir;
  const Run r = run({"--plan", "quick", "--architectures", "mixtral-8x7b", "-o", (dir / "m.yaml").string()});
  CHECK_MESSAGE(r.code == 0, r.err);
  CHECK(r.opened == 1);
  CHECK(contains(r.out, "TFLOP/s"));
  CHECK(contains(r.out, "NVIDIA H200"));
  CHECK(std::filesystem::exists(dir / "m.raw.json"));
  const moesim::models::Profile p = moesim::models::load_profile((dir / "m.yaml").string());
  CHECK(p.base == "h200");  // chosen from the device name
  CHECK(p.gemm_table(moesim::models::Dtype::kBf16)->provenance.kind == moesim::models::SourceKind::kMeasured);
}

TEST_CASE("calibrate cli: an existing output is refused before the GPU is touched") {
  moesim::testing::TempDir dir;
  moesim::testing::write_text(dir / "m.yaml", "keep\n");
  const Run r = run({"--architectures", "mixtral-8x7b", "-o", (dir / "m.yaml").string()});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "--force"));
  CHECK(r.opened == 0);
  CHECK(moesim::testing::read_text(dir / "m.yaml") == "keep\n");
  const Run forced = run({"--architectures", "mixtral-8x7b", "--force", "-o", (dir / "m.yaml").string()});
  CHECK(forced.code == 0);
  CHECK(moesim::testing::read_text(dir / "m.yaml") != "keep\n");
}

TEST_CASE("calibrate cli: no GPU, or a signal, ends with exit 1 and no file") {
  moesim::testing::TempDir dir;
  const Run none = run({"-o", (dir / "m.yaml").string()}, false);
  CHECK(none.code == 1);
  CHECK(contains(none.err, "no GPU"));
  CHECK(contains(none.err, "driver version is insufficient"));
  const Run list = run({"--list-devices"}, false);
  CHECK(list.code == 1);
  CHECK(contains(list.err, "no GPU"));
  const Run stopped = run({"--architectures", "mixtral-8x7b", "-o", (dir / "m.yaml").string()}, true, true);
  CHECK(stopped.code == 1);
  CHECK(contains(stopped.err, "interrupted"));
  CHECK(std::filesystem::is_empty(dir.path()));
}

TEST_CASE("calibrate cli: --dry-run, --help and bad options need no GPU") {
  const Run dry = run({"--dry-run", "--plan", "full", "--gpus", "8", "-b", "1K", "-e", "64M", "-f", "2"}, false);
  CHECK(dry.code == 0);
  CHECK(dry.opened == 0);
  CHECK(contains(dry.out, "estimated total"));
  CHECK(contains(dry.out, "6 ops x 17 sizes"));
  CHECK(run({"--help"}, false).code == 0);
  CHECK(run({"--plan", "fast", "--dry-run"}, false).code == 2);
  const Run bad = run({"--dry-run", "-b", "1G", "-e", "1K"}, false);
  CHECK(bad.code == 2);
  CHECK(contains(bad.err, "larger than"));
  CHECK(run({"--frobnicate"}, false).code == 2);
  CHECK(run({}, false).code == 2);  // no -o
}

TEST_CASE("calibrate cli: a traffic matrix file is checked with file:line") {
  moesim::testing::TempDir dir;
  moesim::testing::write_text(dir / "m.txt", "# weights\n1 2\n3 x\n");
  try {
    mc::read_traffic_matrix((dir / "m.txt").string(), 2);
    FAIL("no error");
  } catch (const moesim::common::InputError& e) {
    CHECK(contains(e.what(), "m.txt:3"));
  }
  moesim::testing::write_text(dir / "ok.txt", "1,2\n3,4\n");
  CHECK(mc::read_traffic_matrix((dir / "ok.txt").string(), 2) == std::vector<double>{1, 2, 3, 4});
  CHECK_THROWS_AS(mc::read_traffic_matrix((dir / "ok.txt").string(), 3), moesim::common::InputError);
}

TEST_CASE("calibrate validate: predictions from a fitted profile match the device at off-grid token counts") {
  moesim::testing::TempDir dir;
  const Run cal = run({"--architectures", "mixtral-8x7b", "-o", (dir / "fake.yaml").string()});
  REQUIRE(cal.code == 0);
  write_trace(dir / "t.mtr", 4000);
  const Run v = run({"validate", "--profile", (dir / "fake.yaml").string(), "--trace", (dir / "t.mtr").string(),
                     "--layers", "0,5", "--batches", "97,1000,3333", "--json", (dir / "v.json").string()});
  CHECK_MESSAGE(v.code == 0, v.err);
  CHECK(contains(v.out, "PASS"));
  const nlohmann::json j = nlohmann::json::parse(moesim::testing::read_text(dir / "v.json"));
  CHECK(j["cases"].size() == 18);  // 3 batches x 2 layers x (alone, with traffic, two micro-batches)
  CHECK(j["median_abs_error"].get<double>() <= 0.05);
  CHECK(j["max_abs_error"].get<double>() <= 0.10);
  bool off_grid = false;
  for (const auto& c : j["cases"])
    for (long t : c["tokens_per_expert"].get<std::vector<long>>()) off_grid = off_grid || (t > 0 && (t & (t - 1)) != 0);
  CHECK(off_grid);
  int two = 0;
  for (const auto& c : j["cases"]) {
    if (c["kind"] != "two micro-batches") continue;
    ++two;
    CHECK(c["phases"].size() == 2);
    CHECK(c["measured_s"].get<double>() < c["measured_sequential_s"].get<double>());  // overlapping saved time
    CHECK(c["measured_overlap_gain"].get<double>() > 0.0);
    CHECK(std::abs(c["sequential_error"].get<double>()) <= 0.10);
  }
  CHECK(two == 6);
  CHECK(contains(v.out, "two micro-batches"));
  CHECK(contains(v.out, "A's experts + B's dispatch"));
  CHECK(contains(v.out, "B's experts + A's combine"));
  CHECK(contains(v.out, "sequential (GEMMs, then traffic)"));

  // A profile that does not describe the device fails the goal: the check can fail.
  const moesim::models::Profile fitted = moesim::models::load_profile((dir / "fake.yaml").string());
  const moesim::models::Architecture a = moesim::models::load_architecture("mixtral-8x7b");
  auto trace = moesim::traces::open_trace((dir / "t.mtr").string());
  const auto cases = mc::validation_cases(*trace, {0}, {1000});
  FakeDevice dev;
  std::ostringstream out;
  const mc::ValidationResult good =
      mc::run_validation(dev, fitted, a, cases, 1, {"copy_kernel", std::nullopt, 64e6, 1, 16, {}}, {1, 5, 0, 0}, out);
  CHECK(good.passed());
  const mc::ValidationResult wrong =
      mc::run_validation(dev, moesim::models::load_profile("a100-sxm"), a, cases, 1,
                         {"copy_kernel", std::nullopt, 64e6, 1, 16, {}}, {1, 5, 0, 0}, out);
  CHECK(!wrong.passed());
}

TEST_CASE("calibrate validate: expert layer work issues one group per projection over experts with tokens") {
  const moesim::models::Architecture a = moesim::models::load_architecture("mixtral-8x7b");
  const mc::GemmWork w = mc::expert_layer_work(a, {10, 0, 3, 0, 0, 0, 0, 1}, 1, moesim::models::Dtype::kBf16);
  REQUIRE(w.size() == 9);  // 3 experts with tokens x 3 projections (SwiGLU)
  CHECK(w[0].m == 10);
  CHECK(w[0].n == a.expert_ffn_size);
  CHECK(w[0].k == a.hidden_size);
  CHECK(w[8].n == a.hidden_size);
  CHECK(w[8].k == a.expert_ffn_size);
  CHECK(mc::expert_layer_work(a, {8, 8}, 2, moesim::models::Dtype::kBf16)[0].n == (a.expert_ffn_size + 1) / 2);
}

TEST_CASE("calibrate validate: a window splits into two micro-batches, the first ceil(n/2) tokens and the rest") {
  moesim::testing::TempDir dir;
  write_trace(dir / "t.mtr", 200);
  const moesim::models::Architecture a = moesim::models::load_architecture("mixtral-8x7b");
  auto trace = moesim::traces::open_trace((dir / "t.mtr").string());
  const auto cases = mc::validation_cases(*trace, {0, 3}, {97, 1});
  // 97 tokens: alone, traffic and two micro-batches per layer; 1 token has no second half.
  REQUIRE(cases.size() == 2 * 3 + 2 * 2);
  int two = 0;
  for (const mc::ValidationCase& c : cases) {
    const long window = c.label.find(", 97 tokens") != std::string::npos ? 97 : 1;
    CHECK(c.halves[0].tokens == (window + 1) / 2);
    CHECK(c.halves[0].tokens + c.halves[1].tokens == window);
    for (int h = 0; h < 2; ++h)
      CHECK(std::accumulate(c.halves[h].tokens_per_expert.begin(), c.halves[h].tokens_per_expert.end(), 0L) ==
            c.halves[h].tokens * a.top_k);
    for (std::size_t e = 0; e < c.tokens_per_expert.size(); ++e)
      CHECK(c.tokens_per_expert[e] == c.halves[0].tokens_per_expert[e] + c.halves[1].tokens_per_expert[e]);
    two += c.kind == mc::CaseKind::kTwoMicroBatches;
  }
  CHECK(two == 2);
  CHECK(std::string(mc::case_kind_name(mc::CaseKind::kTwoMicroBatches)) == "two micro-batches");
}

TEST_CASE("calibrate validate: the fake device's concurrent runs lie between the longer part and the sum") {
  FakeDevice dev;
  const moesim::models::Architecture a = moesim::models::load_architecture("mixtral-8x7b");
  // GEMM-bound (a layer and a small dispatch) and traffic-bound (one small GEMM and a large copy).
  const std::vector<std::pair<mc::GemmWork, double>> pairs{
      {mc::expert_layer_work(a, {60, 0, 30, 10, 0, 0, 0, 0}, 1, moesim::models::Dtype::kBf16), 2e6},
      {{{moesim::models::Dtype::kBf16, 16, 1024, 1024}}, 256e6}};
  for (const auto& [work, bytes] : pairs) {
    const mc::Traffic tr{"copy_kernel", std::nullopt, bytes, 1, 16, {}, 1};
    const mc::ConcurrentRun r = dev.time_concurrent(work, tr, {1, 5, 0, 0});
    REQUIRE(r.span.size() == 5);
    const double g = FakeDevice::true_work(work), c = FakeDevice::true_traffic(tr);
    for (std::size_t i = 0; i < r.span.size(); ++i) {
      CHECK(r.span[i] == std::max(r.gemm[i], r.comm[i]));
      CHECK(r.span[i] >= std::max(r.gemm_alone[i], r.comm_alone[i]));
      CHECK(r.span[i] < r.sequential[i]);
      CHECK(r.sequential[i] == doctest::Approx(r.gemm_alone[i] + r.comm_alone[i]).epsilon(1e-12));
      CHECK(r.gemm_alone[i] == doctest::Approx(g).epsilon(0.01));
      CHECK(r.comm_alone[i] == doctest::Approx(c).epsilon(0.01));
    }
    // The part that ends first was slowed for its whole run, the other only while both ran.
    const double sc = FakeDevice::true_compute_slowdown(bytes), sm = FakeDevice::kCommSlowdown;
    const bool gemm_first = g * sc <= c * sm;
    CHECK(gemm_first == (bytes > 1e8));
    const double first_end = gemm_first ? g * sc : c * sm;
    CHECK(mc::summarize(gemm_first ? r.gemm : r.comm).median == doctest::Approx(first_end).epsilon(0.01));
    const double second = gemm_first ? c + first_end - first_end / sm : g + first_end - first_end / sc;
    CHECK(mc::summarize(r.span).median == doctest::Approx(second).epsilon(0.01));
  }
}

TEST_CASE("calibrate validate: the sharing rule slows each part only while both run") {
  // GEMMs end first: 100 x 1.2 = 120; the traffic did 120 / 1.1 of its 200 by then, the rest alone.
  const mc::PhasePrediction g = mc::concurrent_prediction(100.0, 200.0, 1.2, 1.1);
  CHECK(g.gemm_end == doctest::Approx(120.0));
  CHECK(g.comm_end == doctest::Approx(120.0 + 200.0 - 120.0 / 1.1));
  CHECK(g.span() == g.comm_end);
  CHECK(g.sequential() == 300.0);
  // Traffic ends first: 50 x 1.1 = 55; the GEMMs did 55 / 1.2 of their 100.
  const mc::PhasePrediction c = mc::concurrent_prediction(100.0, 50.0, 1.2, 1.1);
  CHECK(c.comm_end == doctest::Approx(55.0));
  CHECK(c.gemm_end == doctest::Approx(55.0 + 100.0 - 55.0 / 1.2));
  for (const mc::PhasePrediction& p : {g, c}) {
    CHECK(p.span() <= std::max(p.gemm * p.compute_slowdown, p.comm * p.comm_slowdown));
    CHECK(p.span() >= std::max(p.gemm, p.comm));
  }
  // No contention: the longer part alone.
  CHECK(mc::concurrent_prediction(100.0, 40.0, 1.0, 1.0).span() == 100.0);
}

TEST_CASE("calibrate validate: a two-micro-batch prediction is the documented sum over the two phases") {
  moesim::testing::TempDir dir;
  write_trace(dir / "t.mtr", 1000);
  const moesim::models::Profile p = moesim::models::load_profile("h200");
  const moesim::models::Architecture a = moesim::models::load_architecture("mixtral-8x7b");
  auto trace = moesim::traces::open_trace((dir / "t.mtr").string());
  const auto cases = mc::validation_cases(*trace, {2}, {333});
  const mc::ValidationCase& c = cases.at(2);
  REQUIRE(c.kind == mc::CaseKind::kTwoMicroBatches);
  const mc::Traffic traffic{"copy_kernel", std::nullopt, 64e6, 1, 16, {}, 1};
  const auto op = moesim::models::CollectiveOp::kAllToAll;
  for (int tp : {1, 2}) {
    const auto phases = mc::two_batch_phases(a, c, tp, traffic);
    // Phase 1: A's 167 tokens' experts while B's 166 tokens are dispatched; phase 2: B's experts, A's combine.
    CHECK(phases[0].traffic.bytes == 166.0 * a.hidden_size * moesim::models::dispatch_element_bytes(a.dtype) / tp);
    CHECK(phases[1].traffic.bytes == 167.0 * a.hidden_size * moesim::models::combine_element_bytes(a.dtype) / tp);
    CHECK(phases[0].traffic.ctas == 16);
    double expected = 0.0;
    for (int i = 0; i < 2; ++i) {
      const auto& half = c.halves[static_cast<std::size_t>(i)].tokens_per_expert;
      const moesim::models::ExpertWork w = moesim::models::grouped_expert_time(p, a, half, tp);
      const double bytes = phases[static_cast<std::size_t>(i)].traffic.bytes;
      const double comm = p.gemm_table(moesim::models::Dtype::kBf16)->launch_floor + 2.0 * bytes / p.device.hbm_bandwidth;
      CHECK(mc::predict_traffic_time(p, phases[static_cast<std::size_t>(i)].traffic) == doctest::Approx(comm));
      const moesim::models::Slowdown s = moesim::models::contention(p, op, bytes, w.flops);
      const double g = w.time * s.compute, m = comm * s.comm;
      expected += g <= m ? g + comm - g / s.comm : m + w.time - m / s.compute;
    }
    CHECK(mc::predict_case(p, a, c, tp, op, traffic) == doctest::Approx(expected).epsilon(1e-12));
  }
}

TEST_CASE("calibrate validate: traffic whose time the profile cannot give is refused with a reason") {
  moesim::models::Profile p = moesim::models::load_profile("h200");
  CHECK_THROWS_WITH_AS(mc::predict_traffic_time(p, {"copy_engine", std::nullopt, 1e6, 1, 0, {}, 1}),
                       doctest::Contains("not predicted from a profile"), moesim::common::UsageError);
  const mc::Traffic a2a{"nccl", moesim::models::CollectiveOp::kAllToAll, 1e6, 8, 0, {}, 1};
  CHECK(mc::predict_traffic_time(p, a2a) ==
        doctest::Approx(moesim::models::collective_time(p, moesim::models::CollectiveOp::kAllToAll, 8, 1e6, 0, 0)));
  p.collectives.clear();
  CHECK_THROWS_WITH_AS(mc::predict_traffic_time(p, a2a), doctest::Contains("no all_to_all curve"),
                       moesim::common::InputError);
  p.device.hbm_bandwidth = 0.0;
  CHECK_THROWS_WITH_AS(mc::predict_traffic_time(p, {"copy_kernel", std::nullopt, 1e6, 1, 16, {}, 1}),
                       doctest::Contains("hbm_bandwidth"), moesim::common::InputError);
}
