// moesim study's pure parts: shard parsing and assignment, the progress line and plain progress
// lines, the study identity, and reading a variant back from its result.json for the tables.
#include "sim/study/study_run.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "sim/study/runner.hpp"
#include "tests/support/test_support.hpp"

using namespace moesim::sim;
using moesim::testing::error_of;

TEST_CASE("study_run: --shard parses i/N with 1 <= i <= N and shards partition the variants in study order") {
  const Shard s = parse_shard("2/3");
  CHECK(s.index == 2);
  CHECK(s.count == 3);
  for (const char* bad : {"0/3", "4/3", "3", "a/3", "1/", "/3", "1/3/", "1/0", " 1/3", "+1/3"}) {
    INFO(bad);
    CHECK(error_of([&] { parse_shard(bad); }).find("expected i/N with 1 <= i <= N") != std::string::npos);
  }
  CHECK(shard_variants(7, {2, 3}) == std::vector<std::size_t>{1, 4});
  CHECK(shard_variants(2, {3, 3}).empty());
  CHECK(shard_variants(5, {1, 1}) == std::vector<std::size_t>{0, 1, 2, 3, 4});
  for (int n = 1; n <= 5; ++n) {
    std::multiset<std::size_t> all;
    for (int i = 1; i <= n; ++i)
      for (std::size_t v : shard_variants(11, {i, n})) all.insert(v);
    CHECK(all.size() == 11);
    CHECK(std::set<std::size_t>(all.begin(), all.end()).size() == 11);
  }
}

TEST_CASE("study_run: the study identity changes with the file and with the --set overrides") {
  Study a;
  a.sha256 = std::string(64, 'a');
  Study b = a;
  b.sha256 = std::string(64, 'b');
  const std::string id = study_with_overrides_sha256(a, {});
  CHECK(id.size() == 64);
  CHECK(id == study_with_overrides_sha256(a, {}));
  CHECK(id != study_with_overrides_sha256(b, {}));
  CHECK(id != study_with_overrides_sha256(a, {"base.workload.steps=3"}));
  CHECK(study_with_overrides_sha256(a, {"x=1", "y=2"}) != study_with_overrides_sha256(a, {"y=2", "x=1"}));
}

TEST_CASE("study_run: the redrawn progress line holds a bar and k/N and the variant and the times within the width") {
  const std::string line = progress_line(3, 6, "greedy-overlapped", 12.0, 12.0, 100);
  CHECK(line.starts_with("[##########..........] 3/6 variants  greedy-overlapped  12.0 s elapsed, ~12.0 s left"));
  CHECK(progress_line(0, 4, "a", 0.5, std::numeric_limits<double>::quiet_NaN(), 100).find("left") == std::string::npos);
  CHECK(progress_line(4, 4, "", 90.0, 0.0, 100).starts_with("[####################] 4/4 variants  1:30 elapsed"));
  const std::string long_name(200, 'x');
  for (std::size_t width : {30u, 60u, 80u}) {
    INFO(width);
    const std::string cut = progress_line(1, 2, long_name, 1.0, 1.0, width);
    CHECK(cut.size() <= width);
    // The bar and the count come first and survive any width that holds them.
    if (width >= 60) CHECK(cut.starts_with("[##########..........] 1/2 variants"));
  }
  CHECK(progress_line(1, 2, long_name, 1.0, 1.0, 80).find("...") != std::string::npos);
  CHECK(format_duration(4.24) == "4.2 s");
  CHECK(format_duration(187) == "3:07");
  CHECK(format_duration(3723) == "1:02:03");
}

TEST_CASE("study_run: plain progress lines per start and finish with the estimate from the mean time per variant") {
  std::ostringstream out;
  StudyProgress p(out, false, false, 3);
  p.skipped("a", "complete in DIR/variants/a (--resume)");
  p.started("b");
  p.note("b: placement solved into DIR/placements/greedy-0123.yaml");
  p.finished("b", 2.0);
  p.started("c");
  p.finished("c", 4.0);
  p.end();
  const std::string text = out.str();
  CHECK(text.find("[1/3] a: skipped, complete in DIR/variants/a (--resume)\n") != std::string::npos);
  CHECK(text.find("[2/3] b: started\n") != std::string::npos);
  CHECK(text.find("    b: placement solved into") != std::string::npos);
  // One variant left after b, at b's 2 s: "about 2.0 s left"; the last line has no estimate.
  CHECK(text.find("[2/3] b: finished in 2.0 s (elapsed ") != std::string::npos);
  CHECK(text.find(", about 2.0 s left)\n") != std::string::npos);
  CHECK(text.find("[3/3] c: finished in 4.0 s (elapsed ") != std::string::npos);
  CHECK(text.find("\r") == std::string::npos);

  std::ostringstream tty;
  StudyProgress t(tty, true, false, 2, 80);
  t.started("x");
  t.finished("x", 1.0);
  t.end();
  CHECK(tty.str().find("\r[##########..........] 1/2 variants  x  ") != std::string::npos);
  CHECK(tty.str().find("~1.0 s left") != std::string::npos);
  CHECK(tty.str().ends_with("\n"));
  CHECK(tty.str().find("started") == std::string::npos);

  std::ostringstream silent;
  StudyProgress q(silent, false, true, 1);
  q.started("x");
  q.finished("x", 1.0);
  q.end();
  CHECK(silent.str().empty());
}

TEST_CASE("study_run: a variant read back from its result.json gives the same table rows") {
  VariantResult v;
  v.name = "greedy-overlapped";
  v.assignments = {{"placement.policy", "greedy"}, {"overlap.policy", "overlapped"}};
  v.scenario.architecture = "/abs/tiny-moe.yaml";
  v.scenario.cluster = "h100-sxm-4gpu";
  v.scenario.tp = 1;
  v.scenario.ep = 4;
  v.scenario.workload.mode = WorkloadMode::kDecode;
  v.scenario.workload.steps = 3;
  v.scenario.placement.policy = "greedy";
  v.scenario.overlap.policy = OverlapPolicy::kOverlapped;
  v.scenario.overlap.chunks = 4;
  v.scenario.dispatch = DispatchMode::kHierarchical;
  v.scenario.power_cap = 450.0;
  v.profile_name = "h100-sxm";
  v.profile_sources = {"published", "model"};
  v.placement_file = "placements/greedy-0123456789ab.yaml";
  v.inputs = {{"trace_sha256", std::string(64, 'c')}, {"placement_sha256", std::string(64, 'd')}};
  v.timelines.emplace_back();
  v.timelines.front().trace_repeated = true;
  auto& s = v.summary;
  s.p50 = 0.1 / 3.0;
  s.p90 = 1.0 / 7.0;
  s.p99 = 2.0 / 7.0;
  s.max = 0.3;
  s.mean = 0.2;
  s.throughput = 12345.678901234567;
  s.token_tail = 1e-5 / 3.0;
  s.a2a_tail = 2e-5 / 3.0;
  s.a2a_avg = 1e-6;
  s.energy_per_step = 17.123456789;
  s.energy_per_token = std::numeric_limits<double>::quiet_NaN();
  s.avg_power = 512.25;
  s.peak_power = 700.0;
  s.utilisation = 0.4;
  s.compute_slowdown = 0.05;
  s.chunking_cost = std::numeric_limits<double>::quiet_NaN();
  s.sequential_p50 = 0.03;
  s.overlapped_p50 = std::numeric_limits<double>::quiet_NaN();
  s.ideal_p50 = 0.02;

  const auto text = variant_json(v, true).dump(2);
  const VariantResult back = variant_result_from_json(nlohmann::json::parse(text), "x/result.json");
  CHECK(results_csv({back}, "greedy-overlapped") == results_csv({v}, "greedy-overlapped"));
  CHECK(results_table({back}, "other") == results_table({v}, "other"));
  CHECK(variant_json(back, false) == variant_json(v, false));
  CHECK(std::isnan(back.summary.energy_per_token));
  CHECK(back.placement_file == v.placement_file);

  auto broken = nlohmann::json::parse(text);
  broken["inputs"].erase("steps");
  CHECK(error_of([&] {
          variant_result_from_json(broken, "x/result.json");
        }).find("x/result.json: expected the key variant.inputs.steps") != std::string::npos);
  broken = nlohmann::json::parse(text);
  broken["inputs"]["overlap"] = "sideways";
  CHECK(error_of([&] { variant_result_from_json(broken, "x/result.json"); }).find("\"sideways\"") != std::string::npos);
}
