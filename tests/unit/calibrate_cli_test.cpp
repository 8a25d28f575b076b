// moesim-calibrate's command flow with a fake device: measure -> profile, refusals before any GPU
// work, the no-GPU and interrupted paths leaving no file, and `validate`'s predictions.
#include <doctest/doctest.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include "calibrate/cli.hpp"
#include "calibrate/validate.hpp"
#include "calibrate/fake_device.hpp"
#include "models/architecture.hpp"
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
  CHECK(j["cases"].size() == 12);  // 3 batches x 2 layers x (alone, with traffic)
  CHECK(j["median_abs_error"].get<double>() <= 0.05);
  CHECK(j["max_abs_error"].get<double>() <= 0.10);
  bool off_grid = false;
  for (const auto& c : j["cases"])
    for (long t : c["tokens_per_expert"].get<std::vector<long>>()) off_grid = off_grid || (t > 0 && (t & (t - 1)) != 0);
  CHECK(off_grid);

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
