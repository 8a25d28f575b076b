// Traffic that changes, as a user runs it (docs/simulator.md, "Phases and mixes", "Online
// rebalancing"): a study on two phases whose second favours other experts, with EPLB re-solved every
// few steps; a study replaying a load-only count trace; what the results and the console table say.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::read_text;
using moesim::testing::run_moesim;
using moesim::testing::source_dir;
using moesim::testing::TempDir;
using moesim::testing::test_data_dir;
using moesim::testing::write_text;

namespace {

std::string intent() { return (source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string(); }

nlohmann::json variant_of(const nlohmann::json& results, const std::string& name) {
  for (const auto& v : results.at("variants"))
    if (v.at("name") == name) return v;
  FAIL("no variant " << name);
  return {};
}

}  // namespace

TEST_CASE("cli traffic: rebalancing every 5 steps beats the static placement in the second phase, moved bytes add up") {
  TempDir dir;
  // Phase 2: the intent trace with every expert shifted by 32 (other experts hot, the same skew).
  const std::string shifted = (dir / "shift.mtr").string();
  auto gen = run_moesim({"trace", "generate", "--fit", intent(), "--shift", "32", "--tokens", "6000", "--seed", "2",
                         "-o", shifted});
  REQUIRE_MESSAGE(gen.exit_code == 0, gen.err);
  write_text(dir / "s.yaml",
             "schema_version: 1\nkind: study\nname: rb\nbase:\n  architecture: deepseek-v2-lite\n"
             "  cluster: h100-sxm-8gpu\n  trace:\n    phases:\n      - {trace: \"" + intent() + "\", steps: 10}\n"
             "      - {trace: shift.mtr, steps: 20}\n  workload: {mode: prefill, tokens_per_step: 2048, steps: 30}\n"
             "  placement: {policy: eplb, replicas: 8}\n  overlap: {policy: sequential, timelines: requested}\n"
             "sweep:\n  placement.rebalance.every_steps: [never, 5]\n"
             "  placement.rebalance.migration: [blocking, background]\n"
             "exclude:\n  - {placement.rebalance.every_steps: never, placement.rebalance.migration: background}\n");
  const auto r = run_moesim({"study", (dir / "s.yaml").string(), "-o", (dir / "out").string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  // The console table gains the migration columns.
  CHECK(r.out.find("migr ms") != std::string::npos);
  CHECK(r.out.find("moved") != std::string::npos);
  const auto results = nlohmann::json::parse(read_text(dir / "out" / "results.json"));
  const auto fixed = variant_of(results, "never-blocking");
  const auto moving = variant_of(results, "every_steps5-blocking");
  const auto background = variant_of(results, "every_steps5-background");
  CHECK_FALSE(fixed.contains("rebalance"));
  REQUIRE(fixed.at("phases").size() == 2);
  REQUIRE(moving.at("phases").size() == 2);
  const double fixed_p50 = fixed.at("phases")[1].at("p50_s"), moving_p50 = moving.at("phases")[1].at("p50_s");
  MESSAGE("phase 2 p50: static " << fixed_p50 << " s, every 5 steps " << moving_p50 << " s");
  CHECK(moving_p50 < fixed_p50);
  // Five rebalances (before steps 5, 10, 15, 20, 25), each moving experts x 17,301,504 bytes
  // (DeepSeek-V2-Lite: SwiGLU, hidden 2048, expert FFN 1408, bf16).
  for (const auto& v : {moving, background}) {
    const auto& rb = v.at("rebalance");
    CHECK(rb.at("every_steps") == 5);
    CHECK(rb.at("rebalances") == 5);
    double bytes = 0.0, experts = 0.0;
    for (const auto& e : rb.at("events")) {
      CHECK(e.at("bytes").get<double>() == e.at("experts_moved").get<double>() * 17301504.0);
      bytes += e.at("bytes").get<double>();
      experts += e.at("experts_moved").get<double>();
    }
    CHECK(rb.at("moved_bytes").get<double>() == bytes);
    CHECK(rb.at("experts_moved").get<double>() == experts);
    CHECK(experts > 0);
  }
  // Blocking: a rebalance step is the step plus the migration; its migration time is reported.
  CHECK(moving.at("rebalance").at("migration_s").get<double>() > 0.0);
  // The scenario written back holds the phases and the rebalance, and reads back.
  const std::string scenario = read_text(dir / "out" / "variants" / "every_steps5-blocking" / "scenario.yaml");
  CHECK(scenario.find("phases:") != std::string::npos);
  CHECK(scenario.find("rebalance: {every_steps: 5, window_steps: 5, migration: blocking}") != std::string::npos);
}

TEST_CASE("cli traffic: a study replays a load-only count trace, the placement solved on its counts") {
  TempDir dir;
  write_text(dir / "s.yaml", "schema_version: 1\nkind: study\nname: counts\nbase:\n  architecture: deepseek-v2-lite\n"
                             "  cluster: h100-sxm-8gpu\n  trace: \"" +
                                 (test_data_dir() / "traces" / "load_dsv2_lite.mlt").string() +
                                 "\"\n  workload: {mode: prefill, steps: 6, sequence_length: 32}\n"
                                 "  placement: {policy: eplb}\n  overlap: {policy: sequential, timelines: requested}\n");
  const auto r = run_moesim({"study", (dir / "s.yaml").string(), "-o", (dir / "out").string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto results = nlohmann::json::parse(read_text(dir / "out" / "results.json"));
  const auto v = results.at("variants").at(0);
  CHECK(v.at("inputs").at("routing") == "counts");
  // 4 iterations of 263 tokens in all, replayed from the start after the fourth step.
  CHECK(v.at("trace_repeated") == true);
  // A mix of a load-only trace is refused: it has no sequences to draw.
  write_text(dir / "m.yaml", "schema_version: 1\nkind: study\nbase:\n  architecture: deepseek-v2-lite\n"
                             "  cluster: h100-sxm-8gpu\n  trace: {mix: [{trace: \"" +
                                 (test_data_dir() / "traces" / "load_dsv2_lite.mlt").string() +
                                 "\", weight: 1}]}\n  workload: {mode: prefill, steps: 6}\n");
  const auto m = run_moesim({"study", (dir / "m.yaml").string(), "--check"});
  CHECK(m.exit_code == 2);
  CHECK(m.err.find("base.trace.mix[0].trace: expected a per-token trace") != std::string::npos);
}

TEST_CASE("cli traffic: moesim place solves on a load-only count trace") {
  TempDir dir;
  const std::string mlt = (test_data_dir() / "traces" / "load_dsv2_lite.mlt").string();
  const auto r = run_moesim({"place", "--trace", mlt, "--architecture", "deepseek-v2-lite", "--cluster", "h100-sxm-8gpu",
                             "--policy", "eplb", "--replicas", "8", "-o", (dir / "p.yaml").string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string placement = read_text(dir / "p.yaml");
  CHECK(placement.find("policy: eplb") != std::string::npos);
  // The wrong architecture for the counts: refused, naming the file.
  const auto bad = run_moesim({"place", "--trace", mlt, "--architecture", "mixtral-8x7b", "--cluster", "h100-sxm-8gpu",
                               "--policy", "eplb", "-o", (dir / "q.yaml").string()});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find(mlt + ": expected a trace of mixtral-8x7b") != std::string::npos);
}
