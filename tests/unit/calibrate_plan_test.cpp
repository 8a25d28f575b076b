// moesim-calibrate host side: sizes (-b/-e/-f), dtypes, plans and the dry-run estimate.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "calibrate/plan.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "models/architecture.hpp"
#include "models/costs.hpp"
#include "models/profile.hpp"

namespace mc = moesim::calibrate;
using moesim::common::UsageError;
using moesim::models::CollectiveOp;
using moesim::models::Dtype;

TEST_CASE("calibrate: sizes parse as nccl-tests' -b/-e with binary multiples") {
  CHECK(mc::parse_size("1024", "-b") == 1024.0);
  CHECK(mc::parse_size("1K", "-b") == 1024.0);
  CHECK(mc::parse_size("64M", "-b") == 64.0 * 1048576.0);
  CHECK(mc::parse_size("1G", "-e") == 1073741824.0);
  for (const char* bad : {"", "K", "abc", "-1", "0", "1X", "1.5.2M"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(mc::parse_size(bad, "-b/--minbytes"), UsageError);
  }
  try {
    mc::parse_size("12Q", "-e/--maxbytes");
    FAIL("no error");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("-e/--maxbytes") != std::string::npos);
    CHECK(std::string(e.what()).find("12Q") != std::string::npos);
  }
}

TEST_CASE("calibrate: a size range expands like nccl-tests -f and rejects bad ranges") {
  const auto s = mc::expand_sizes({1024.0, 1073741824.0, 2.0});
  REQUIRE(s.size() == 21);
  CHECK(s.front() == 1024.0);
  CHECK(s.back() == 1073741824.0);
  for (std::size_t i = 1; i < s.size(); ++i) CHECK(s[i] == 2.0 * s[i - 1]);
  CHECK(mc::expand_sizes({1024.0, 268435456.0, 4.0}).size() == 10);
  CHECK(mc::expand_sizes({8.0, 8.0, 2.0}).size() == 1);
  CHECK_THROWS_AS(mc::expand_sizes({1024.0, 4096.0, 1.0}), UsageError);
  CHECK_THROWS_AS(mc::expand_sizes({4096.0, 1024.0, 2.0}), UsageError);
}

TEST_CASE("calibrate: dtypes are checked, with a suggestion for a typo") {
  CHECK(mc::parse_dtypes("bf16,fp8") == std::vector<Dtype>{Dtype::kBf16, Dtype::kFp8});
  try {
    mc::parse_dtypes("bf61");
    FAIL("no error");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("bf16") != std::string::npos);
  }
  CHECK_THROWS_AS(mc::parse_dtypes("bf16,bf16"), UsageError);
  CHECK_THROWS_AS(mc::parse_dtypes(""), UsageError);
  CHECK_THROWS_AS(mc::parse_plan_kind("fast"), UsageError);
  CHECK(mc::parse_plan_kind("full") == mc::PlanKind::kFull);
}

TEST_CASE("calibrate: the quick plan covers every shipped architecture's GEMM shapes") {
  const mc::Plan plan = mc::make_plan({});
  std::set<std::pair<long, long>> covered;
  for (const mc::GemmCurveCase& c : plan.gemms) {
    if (c.dtype == Dtype::kBf16) covered.insert({c.n, c.k});
    CHECK(std::is_sorted(c.m.begin(), c.m.end()));
    CHECK(c.m.front() == 1);
    CHECK(c.m.back() == 65536);
  }
  for (const std::string& name : moesim::common::config_names("architectures")) {
    CAPTURE(name);
    for (const moesim::models::GemmShape& s : moesim::models::gemm_shapes(moesim::models::load_architecture(name), 1))
      CHECK(covered.count({s.n, s.k}) == 1);
  }
  CHECK(plan.collectives.empty());  // one GPU: no peers
  CHECK(!plan.grouped.empty());
  for (const mc::GroupedCase& g : plan.grouped) CHECK(g.work.size() >= 2);
  // The single-GPU contention grid ("any") is complete: every bytes x FLOP pair once.
  std::set<double> bytes, flops;
  std::size_t grid = 0;
  for (const mc::ContentionCase& c : plan.contention)
    if (c.in_grid && c.comm_op == std::nullopt) {
      ++grid;
      bytes.insert(c.traffic.bytes);
      flops.insert(mc::work_flops(c.gemm));
      CHECK(c.traffic.kind == "copy_kernel");
    }
  CHECK(grid == bytes.size() * flops.size());
  CHECK(grid >= 4);
  CHECK(plan.power_limit_fractions.empty());  // never without --allow-set-power-limit
  CHECK(plan.clock_fractions.empty());
  // Power by kernel class: per dtype a compute-bound and a memory-bound GEMM loop, on either side of
  // every shipped GPU's roofline ridge.
  for (const std::string gpu : {"a100-sxm", "h100-sxm", "h200"}) {
    const moesim::models::Profile prof = moesim::models::load_profile(gpu);
    for (const Dtype d : plan.dtypes) {
      if (!prof.gemm_table(d)) continue;
      CAPTURE(gpu);
      int compute = 0, memory = 0;
      for (const mc::PowerState& s : plan.power) {
        if (s.dtype != d || s.gemm.size() != 1) continue;
        const mc::GemmOp& g = s.gemm.front();
        const double m = static_cast<double>(g.m), n = static_cast<double>(g.n), k = static_cast<double>(g.k);
        const auto cls = moesim::models::compute_class(prof, d, moesim::models::gemm_flops(m, n, k),
                                                       moesim::models::gemm_bytes(d, m, n, k));
        if (s.state == "compute") compute += cls == moesim::models::ComputeClass::kComputeBound;
        if (s.state == "memory_bound") memory += cls == moesim::models::ComputeClass::kMemoryBound;
      }
      CHECK(compute == 1);
      CHECK(memory == 1);
    }
  }
}

TEST_CASE("calibrate: plan dtypes follow the device and multi-GPU plans measure every collective") {
  mc::PlanOptions o;
  o.fp8_supported = false;
  const mc::Plan no_fp8 = mc::make_plan(o);
  CHECK(std::find(no_fp8.dtypes.begin(), no_fp8.dtypes.end(), Dtype::kFp8) == no_fp8.dtypes.end());
  o.dtypes = {Dtype::kFp8};
  CHECK_THROWS_AS(mc::make_plan(o), UsageError);

  mc::PlanOptions multi;
  multi.gpus = 8;
  multi.kind = mc::PlanKind::kFull;
  multi.architectures = {"mixtral-8x7b"};
  multi.allow_set_power_limit = true;
  const mc::Plan p = mc::make_plan(multi);
  std::set<CollectiveOp> ops;
  bool matrix = false;
  for (const mc::CollectiveCase& c : p.collectives) {
    ops.insert(c.traffic.op.value());
    matrix = matrix || !c.traffic.traffic_matrix.empty();
    CHECK(c.sizes.size() == 21);
    CHECK(c.traffic.ranks == (c.traffic.op == CollectiveOp::kSendRecv ? 2 : 8));
  }
  CHECK(ops == std::set<CollectiveOp>{CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter,
                                      CollectiveOp::kAllToAll, CollectiveOp::kSendRecv});
  CHECK(matrix);
  CHECK(!p.power_limit_fractions.empty());
  for (const mc::ContentionCase& c : p.contention) CHECK(c.traffic.kind == "nccl");
}

TEST_CASE("calibrate: the dry-run estimate fits the issue's budgets and grows with the work") {
  const moesim::models::Profile h200 = moesim::models::load_profile("h200");
  const mc::Plan quick = mc::make_plan({});
  const mc::PlanEstimate eq = mc::estimate_plan(quick, h200);
  CHECK(eq.total() > 30.0);   // about two minutes ...
  CHECK(eq.total() < 180.0);  // ... on one GPU
  mc::PlanOptions fo;
  fo.kind = mc::PlanKind::kFull;
  const mc::Plan full = mc::make_plan(fo);
  const mc::PlanEstimate ef = mc::estimate_plan(full, h200);
  CHECK(ef.total() > eq.total());
  CHECK(ef.total() < 300.0);
  mc::Plan more = quick;
  more.gemm_timing.repetitions *= 2;
  CHECK(mc::estimate_plan(more, h200).gemm > eq.gemm);
  const std::string text = mc::describe_plan(quick, eq);
  CHECK(text.find("estimated total") != std::string::npos);
  CHECK(text.find("--allow-set-power-limit") != std::string::npos);
}
