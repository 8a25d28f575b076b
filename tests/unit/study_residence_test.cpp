// dispatch.mode residence in a study file (docs/study-format.md): it parses and writes back, and each
// setting it cannot run with is refused naming the key and the fix.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "sim/study/study_file.hpp"
#include "tests/support/test_support.hpp"

using namespace moesim;
using moesim::testing::error_of;

namespace fs = std::filesystem;

namespace {

const std::string kTrace = (testing::source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string();

std::string study_text(const std::string& mode, const std::string& overlap, int tp = 1) {
  return "schema_version: 1\nkind: study\nbase:\n  architecture: deepseek-v2-lite\n  cluster: h100-sxm-8gpu\n"
         "  trace: \"" + kTrace + "\"\n  parallelism: {tp: " + std::to_string(tp) + ", ep: " + std::to_string(8 / tp) +
         "}\n  workload: {mode: " + mode + ", steps: 4}\n  overlap: {policy: " + overlap + "}\n"
         "  dispatch: {mode: residence}\n";
}

sim::Study load(const testing::TempDir& dir, const std::string& text) {
  const fs::path file = dir / "s.yaml";
  testing::write_text(file, text);
  return sim::load_study(file.string());
}

}  // namespace

TEST_CASE("study residence: decode and prefill parse, with TP too, and write the mode back") {
  testing::TempDir dir;
  for (const char* mode : {"decode", "prefill"}) {
    const sim::Study s = load(dir, study_text(mode, "overlapped"));
    REQUIRE(s.variants.size() == 1);
    CHECK(s.variants[0].scenario.dispatch == sim::DispatchMode::kResidence);
    CHECK(sim::scenario_to_yaml(s.variants[0].scenario).find("dispatch: {mode: residence") != std::string::npos);
  }
  CHECK(load(dir, study_text("decode", "sequential", 2)).variants[0].scenario.tp == 2);
}

TEST_CASE("study residence: training and two-batch overlap are refused naming dispatch.mode") {
  testing::TempDir dir;
  const std::string training = error_of([&] { load(dir, study_text("training", "sequential")); });
  CHECK(training.find("base.dispatch.mode: expected flat, hierarchical or low_latency for workload.mode training") !=
        std::string::npos);
  CHECK(training.find("s.yaml:") != std::string::npos);
  const std::string tbo = error_of([&] { load(dir, study_text("decode", "tbo")); });
  CHECK(tbo.find("base.dispatch.mode: expected flat, hierarchical or low_latency with overlap.policy tbo") !=
        std::string::npos);
}
