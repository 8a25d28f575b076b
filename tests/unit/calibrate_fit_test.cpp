// moesim-calibrate: a plan run on a fake device, fitted into a profile that the simulator loads,
// with every measured section `source: measured`; atomic, non-overwriting output.
#include <doctest/doctest.h>

#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "calibrate/fit.hpp"
#include "calibrate/plan.hpp"
#include "calibrate/runner.hpp"
#include "calibrate/fake_device.hpp"
#include "common/error.hpp"
#include "models/costs.hpp"
#include "models/profile.hpp"
#include "tests/support/test_support.hpp"

namespace mc = moesim::calibrate;
namespace mm = moesim::models;
using moesim::calibrate::FakeDevice;

namespace {

struct Fitted {
  mc::Plan plan;
  mc::Measurements m;
  mm::Profile profile;
};

Fitted fit_quick(bool allow_power = false) {
  mc::PlanOptions o;
  o.architectures = {"mixtral-8x7b"};
  o.allow_set_power_limit = allow_power;
  Fitted f;
  f.plan = mc::make_plan(o);
  FakeDevice dev;
  std::ostringstream log;
  f.m = mc::run_plan(dev, f.plan, log, {});
  f.profile = mc::fit_profile(f.m, mm::load_profile("h200"), {"fake-h200", "h200", "moesim-calibrate test"});
  return f;
}

}  // namespace

TEST_CASE("calibrate: monotone and the launch-floor fit") {
  CHECK(mc::monotone({3, 2, 5, 4}) == std::vector<double>{3, 3, 5, 5});
  mc::GroupedRecord g;
  g.work = {{mm::Dtype::kBf16, 1, 1, 1},
            {mm::Dtype::kBf16, 2, 1, 1},
            {mm::Dtype::kBf16, 3, 1, 1},
            {mm::Dtype::kBf16, 4, 1, 1}};
  g.time.median = 31e-6;
  g.singles_sum = 40e-6;  // four launches of 3 us floor: (40 - 31) / 3 = 3 us
  CHECK(mc::fit_launch_floor({g}, mm::Dtype::kBf16, 1.0) == doctest::Approx(3e-6));
  CHECK(mc::fit_launch_floor({g}, mm::Dtype::kBf16, 2e-6) == doctest::Approx(2e-6));  // never above the shortest time
  CHECK(mc::fit_launch_floor({g}, mm::Dtype::kFp8, 1.0) == 0.0);
  CHECK(mc::pcie_lane_rate(5) * 16 == doctest::Approx(63.0e9).epsilon(0.01));
}

TEST_CASE("calibrate: a fitted profile recovers the device's truth and says measured") {
  const Fitted f = fit_quick();
  const mm::Profile& p = f.profile;
  CHECK(p.base == "h200");
  CHECK(p.device.name == "NVIDIA H200");
  CHECK(p.device.provenance.kind == mm::SourceKind::kMeasured);
  CHECK(p.device.hbm_bandwidth == doctest::Approx(FakeDevice::kCopyRate).epsilon(0.01));
  REQUIRE(p.gemm_table(mm::Dtype::kBf16));
  REQUIRE(p.gemm_table(mm::Dtype::kFp8));
  for (const mm::GemmTable& t : p.gemm) {
    CAPTURE(mm::dtype_name(t.dtype));
    CHECK(t.provenance.kind == mm::SourceKind::kMeasured);
    CHECK(t.launch_floor == doctest::Approx(FakeDevice::kFloor).epsilon(0.05));
  }
  // The table reproduces the truth at its points and between them (log-log interpolation).
  for (long m : {1L, 64L, 700L, 3000L, 50000L}) {
    CAPTURE(m);
    const double truth = FakeDevice::true_work({{mm::Dtype::kBf16, m, 14336, 4096}});
    CHECK(mm::gemm_time(p, mm::Dtype::kBf16, static_cast<double>(m), 14336, 4096) ==
          doctest::Approx(truth).epsilon(0.03));
  }
  REQUIRE(!p.contention.points.empty());
  for (const mm::ContentionPoint& c : p.contention.points) {
    CHECK(c.comm_op == std::nullopt);
    CHECK(c.compute_slowdown == doctest::Approx(FakeDevice::true_compute_slowdown(c.comm_bytes)).epsilon(0.01));
    CHECK(c.comm_slowdown == doctest::Approx(FakeDevice::kCommSlowdown).epsilon(0.01));
  }
  CHECK(p.contention.provenance.kind == mm::SourceKind::kMeasured);
  CHECK(p.power.provenance.kind == mm::SourceKind::kMeasured);
  CHECK(p.power.idle == doctest::Approx(FakeDevice::kIdle));
  CHECK(p.power.compute.at(mm::Dtype::kBf16) == doctest::Approx(FakeDevice::kCompute));
  CHECK(p.power.overlapped.at(mm::Dtype::kBf16) == doctest::Approx(FakeDevice::kBoth));
  // The memory-bound GEMM loop gives the memory-bound class its own figure, for every dtype measured.
  CHECK(p.power.memory_bound.at(mm::Dtype::kBf16) == doctest::Approx(FakeDevice::kMemoryBound));
  CHECK(p.power.memory_bound.size() == p.power.compute.size());
  CHECK(p.power.max_power == 700.0);
  // Without --allow-set-power-limit the cap curve is the base's, with the base's provenance.
  CHECK(p.power.cap_provenance.kind != mm::SourceKind::kMeasured);
  CHECK(p.collectives.empty());  // one GPU: the base supplies them
  CHECK(p.pcie.provenance.kind == mm::SourceKind::kMeasured);
  CHECK(p.pcie.bandwidth_efficiency == doctest::Approx(FakeDevice::kPcieRate / (16 * 3.938e9)).epsilon(0.02));
}

TEST_CASE("calibrate: a power-limit sweep yields a measured cap curve") {
  const Fitted f = fit_quick(true);
  REQUIRE(f.profile.power.cap_fraction.size() >= 2);
  CHECK(f.profile.power.cap_provenance.kind == mm::SourceKind::kMeasured);
  CHECK(f.profile.power.cap_fraction.back() == doctest::Approx(1.0));
  CHECK(f.profile.power.speed_fraction.back() == doctest::Approx(1.0));
  CHECK(f.profile.power.speed_fraction.front() < 0.9);  // the fake slows under a low cap
}

TEST_CASE("calibrate: the written profile loads back, merged with its base, and the raw JSON has every sample") {
  const Fitted f = fit_quick();
  moesim::testing::TempDir dir;
  const auto yaml = dir / "fake-h200.yaml";
  const auto raw = mc::default_raw_path(yaml);
  CHECK(raw.filename() == "fake-h200.raw.json");
  mc::write_outputs(f.profile, f.m, yaml, raw, false);
  const mm::Profile loaded = mm::load_profile(yaml.string());
  CHECK(loaded.device.name == "NVIDIA H200");
  REQUIRE(loaded.gemm_table(mm::Dtype::kBf16));
  CHECK(loaded.gemm_table(mm::Dtype::kBf16)->provenance.kind == mm::SourceKind::kMeasured);
  CHECK(!loaded.collectives.empty());  // from the base
  const auto kinds = loaded.source_kinds();
  CHECK(std::find(kinds.begin(), kinds.end(), "measured") != kinds.end());
  const std::string text = moesim::testing::read_text(yaml);
  CHECK(text.find("base: ") != std::string::npos);
  CHECK(text.find("kind: measured") != std::string::npos);

  const nlohmann::json j = nlohmann::json::parse(moesim::testing::read_text(raw));
  CHECK(j["schema_version"] == 1);
  CHECK(j["context"]["tool"] == "moesim-calibrate");
  CHECK(j["gemm"].size() == f.plan.gemm_count());
  CHECK(j["gemm"][0]["samples_s"].size() == static_cast<std::size_t>(f.plan.gemm_timing.repetitions));
  CHECK(j["contention"].size() == f.plan.contention.size());
  CHECK(j["power"].size() == f.plan.power.size());
}

TEST_CASE("calibrate: outputs are never overwritten without --force and a failure leaves no file") {
  const Fitted f = fit_quick();
  moesim::testing::TempDir dir;
  const auto yaml = dir / "p.yaml";
  const auto raw = dir / "p.raw.json";
  moesim::testing::write_text(yaml, "old\n");
  CHECK_THROWS_AS(mc::write_outputs(f.profile, f.m, yaml, raw, false), moesim::common::UsageError);
  CHECK(moesim::testing::read_text(yaml) == "old\n");
  CHECK(!std::filesystem::exists(raw));  // checked before either file is written
  mc::write_outputs(f.profile, f.m, yaml, raw, true);
  CHECK(moesim::testing::read_text(yaml) != "old\n");

  // A profile the loader would refuse (a GEMM faster than its peak: a wrong unit) is never written.
  mm::Profile bad = f.profile;
  bad.gemm.front().peak_flops = 1e9;
  const auto bad_yaml = dir / "bad.yaml";
  CHECK_THROWS_AS(mc::write_outputs(bad, f.m, bad_yaml, dir / "bad.raw.json", false), moesim::common::InputError);
  CHECK(!std::filesystem::exists(bad_yaml));
  CHECK(!std::filesystem::exists(dir / "bad.raw.json"));
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    CHECK(e.path().filename().string().find("bad") == std::string::npos);
}

TEST_CASE("calibrate: a multi-GPU full plan yields measured collectives, NVLink figures and per-op contention grids") {
  mc::PlanOptions o;
  o.kind = mc::PlanKind::kFull;
  o.gpus = 8;
  o.architectures = {"mixtral-8x7b"};
  o.sizes = mc::SizeRange{1024.0, 16777216.0, 4.0};
  const mc::Plan plan = mc::make_plan(o);
  FakeDevice dev(8);
  std::ostringstream log;
  const mc::Measurements m = mc::run_plan(dev, plan, log, {});
  CHECK(log.str().find("#wrong") != std::string::npos);
  const mm::Profile p = mc::fit_profile(m, mm::load_profile("h200"), {"fake8", "h200", "test"});
  std::set<std::pair<mm::CollectiveOp, int>> curves;
  for (const mm::CollectiveCurve& c : p.collectives) {
    curves.insert({c.op, c.ranks});
    CHECK(c.provenance.kind == mm::SourceKind::kMeasured);
    CHECK(c.bytes.size() == 8);  // 1K, 4K, ..., 16M
  }
  CHECK(curves == std::set<std::pair<mm::CollectiveOp, int>>{{mm::CollectiveOp::kAllReduce, 8},
                                                             {mm::CollectiveOp::kAllGather, 8},
                                                             {mm::CollectiveOp::kReduceScatter, 8},
                                                             {mm::CollectiveOp::kAllToAll, 8},
                                                             {mm::CollectiveOp::kSendRecv, 2}});
  CHECK(p.nvlink.provenance.kind == mm::SourceKind::kMeasured);
  CHECK(p.nvlink.bandwidth_efficiency == doctest::Approx((16777216.0 / (10e-6 + 16777216.0 / 300e9)) / 450e9).epsilon(0.01));
  std::vector<std::string> grids;  // in the profile's order: by name
  for (const mm::ContentionPoint& c : p.contention.points)
    if (grids.empty() || grids.back() != mm::contention_op_name(c.comm_op))
      grids.push_back(mm::contention_op_name(c.comm_op));
  CHECK(grids == std::vector<std::string>{"all_gather", "all_to_all", "reduce_scatter"});
  // Every CTA count of the sweep is a grid of its own (the SMs the communication holds), each GEMM
  // in its roofline class; the default SM count is NCCL's usual 16.
  std::set<int> sms;
  for (const mm::ContentionPoint& c : p.contention.points) {
    sms.insert(c.comm_sms);
    CHECK(c.compute.has_value());
  }
  CHECK(sms == std::set<int>{8, 16, 32});
  CHECK(p.contention.comm_sms == 16);
  CHECK(p.gemm.size() == 5);
  // The simulator's collective model reads the measured curve back (busbw terms, nccl-tests sizes).
  CHECK(mm::collective_time(p, mm::CollectiveOp::kAllReduce, 8, 4194304.0, 450e9, 1e-6) ==
        doctest::Approx(10e-6 + 4194304.0 / 300e9).epsilon(0.01));
  // The written text survives the loader's checks.
  CHECK_NOTHROW(mc::profile_text(p, "fake8.yaml"));
}

namespace {
// cuBLASLt on some GPUs has no fp8 algorithm for tiny m: the run reports it and goes on.
class NoTinyFp8Device : public FakeDevice {
 public:
  std::vector<double> time_gemm(const mc::GemmWork& w, const mc::Timing& t) override {
    for (const mc::GemmOp& op : w)
      if (op.dtype == mm::Dtype::kFp8 && op.m < 16) throw mc::UnsupportedError("no algorithm");
    return FakeDevice::time_gemm(w, t);
  }
};
}  // namespace

TEST_CASE("calibrate: an unsupported GEMM is reported and skipped, the rest is fitted") {
  mc::PlanOptions o;
  o.architectures = {"mixtral-8x7b"};
  const mc::Plan plan = mc::make_plan(o);
  NoTinyFp8Device dev;
  std::ostringstream log;
  const mc::Measurements m = mc::run_plan(dev, plan, log, {});
  CHECK(log.str().find("unsupported (no algorithm)") != std::string::npos);
  const mm::Profile p = mc::fit_profile(m, mm::load_profile("h200"), {"x", "h200", "test"});
  REQUIRE(p.gemm_table(mm::Dtype::kFp8));
  for (const mm::GemmCurve& c : p.gemm_table(mm::Dtype::kFp8)->curves) CHECK(c.m.front() == 16.0);
  CHECK(p.gemm_table(mm::Dtype::kBf16)->curves.front().m.front() == 1.0);
  CHECK_NOTHROW(mc::profile_text(p, "x.yaml"));
}
