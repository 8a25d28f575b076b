// Traffic that changes in a study file: trace phases and mixes, and online rebalancing
// (docs/study-format.md): what they parse to, how a scenario writes them back, and each bad input's
// message naming the file, the entry and the fix.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "common/yaml.hpp"
#include "sim/study/study_file.hpp"
#include "tests/support/test_support.hpp"

using namespace moesim;
using moesim::testing::error_of;

namespace fs = std::filesystem;

namespace {

const std::string kTrace = (testing::source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string();

// A study of DeepSeek-V2-Lite decode with `trace` and `placement` as given (YAML flow text).
std::string study_text(const std::string& trace, const std::string& placement, const std::string& mode = "decode") {
  return "schema_version: 1\nkind: study\nbase:\n  architecture: deepseek-v2-lite\n  cluster: h100-sxm-8gpu\n"
         "  trace: " + trace + "\n  workload: {mode: " + mode + ", steps: 20, warmup_steps: 2}\n"
         "  placement: " + placement + "\n";
}

sim::Study load(const testing::TempDir& dir, const std::string& text) {
  const fs::path file = dir / "s.yaml";
  testing::write_text(file, text);
  return sim::load_study(file.string());
}

std::string error_loading(const testing::TempDir& dir, const std::string& text) {
  return error_of([&] { load(dir, text); });
}

}  // namespace

TEST_CASE("study traffic: phases and mixes parse, and a scenario writes them back") {
  testing::TempDir dir;
  const std::string phases = "{phases: [{trace: \"" + kTrace + "\", steps: 12}, {trace: \"" + kTrace + "\", steps: 8}]}";
  sim::Study st = load(dir, study_text(phases, "{policy: eplb, rebalance: {every_steps: 5, migration: background}}"));
  const sim::Scenario& s = st.variants.front().scenario;
  CHECK(s.trace_mix == sim::TraceMix::kPhases);
  REQUIRE(s.trace_parts.size() == 2);
  CHECK(s.trace_parts[0].steps == 12);
  CHECK(s.trace_parts[1].steps == 8);
  CHECK(s.trace == kTrace);
  CHECK(s.placement.rebalance.every_steps == 5);
  CHECK(s.placement.rebalance.window_steps == 5);  // the interval, unless given
  CHECK(s.placement.rebalance.migration == sim::MigrationMode::kBackground);
  CHECK(sim::revalidate_scenario(s, "again") == s);

  const std::string mix = "{mix: [{trace: \"" + kTrace + "\", weight: 0.7}, {trace: \"" + kTrace + "\", weight: 0.3}]}";
  st = load(dir, study_text(mix, "{policy: contiguous}"));
  const sim::Scenario& m = st.variants.front().scenario;
  CHECK(m.trace_mix == sim::TraceMix::kMix);
  REQUIRE(m.trace_parts.size() == 2);
  CHECK(m.trace_parts[0].weight == doctest::Approx(0.7));
  CHECK(sim::revalidate_scenario(m, "again") == m);
}

TEST_CASE("study traffic: never, and an interval longer than the run, keep the static scenario") {
  testing::TempDir dir;
  const sim::Study never = load(dir, study_text("\"" + kTrace + "\"", "{policy: eplb, rebalance: {every_steps: never}}"));
  const sim::Study none = load(dir, study_text("\"" + kTrace + "\"", "{policy: eplb}"));
  CHECK(never.variants.front().scenario == none.variants.front().scenario);
  // Longer than the run: accepted, the window is the whole run.
  const sim::Study longer = load(dir, study_text("\"" + kTrace + "\"", "{policy: eplb, rebalance: {every_steps: 1000}}"));
  CHECK(longer.variants.front().scenario.placement.rebalance.window_steps == 22);
}

TEST_CASE("study traffic: each bad phase, mix or rebalance names the entry and the fix") {
  testing::TempDir dir;
  const std::string t = "\"" + kTrace + "\"";
  struct Case {
    std::string trace, placement, mode, fragment;
  };
  const Case cases[] = {
      {"{phases: []}", "{policy: eplb}", "decode", "base.trace.phases: expected at least one phase"},
      {"{mix: []}", "{policy: eplb}", "decode", "base.trace.mix: expected at least one mix entry"},
      {"{mix: [{trace: " + t + ", weight: 0}]}", "{policy: eplb}", "decode",
       "base.trace.mix[0].weight: expected a weight > 0"},
      {"{mix: [{trace: " + t + ", weight: -1}]}", "{policy: eplb}", "decode",
       "base.trace.mix[0].weight: expected a weight > 0"},
      {"{phases: [{trace: " + t + ", steps: 0}]}", "{policy: eplb}", "decode", "base.trace.phases[0].steps"},
      {"{phases: [{trace: missing.mtr, steps: 5}]}", "{policy: eplb}", "decode",
       "base.trace.phases[0].trace: expected an existing file"},
      {"{phases: [{trace: " + t + ", steps: 5}], mix: [{trace: " + t + ", weight: 1}]}", "{policy: eplb}", "decode",
       "expected either trace.phases or trace.mix"},
      {t, "{policy: eplb, rebalance: {every_steps: 5, window_steps: 23}}", "decode",
       "base.placement.rebalance.window_steps: expected a window of at most the run's 22 steps"},
      {t, "{policy: contiguous, rebalance: {every_steps: 5}}", "decode",
       "expected placement.rebalance with a policy that reads load"},
      {t, "{policy: eplb, rebalance: {every_steps: 5}}", "training", "expected placement.rebalance only for prefill or decode"},
      {t, "{policy: eplb, rebalance: {every_steps: 5, migration: teleport}}", "decode",
       "expected one of blocking, background, free"},
      {t, "{policy: eplb, rebalance: {every_steps: 0}}", "decode", "base.placement.rebalance.every_steps"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.trace);
    CAPTURE(c.placement);
    const std::string e = error_loading(dir, study_text(c.trace, c.placement, c.mode));
    CHECK_MESSAGE(e.find((dir / "s.yaml").string() + ":") == 0, e);
    CHECK_MESSAGE(e.find(c.fragment) != std::string::npos, e);
  }
}
