// Files the tool writes and later reads, written and read back: a variant's scenario.yaml parses to
// the scenario it was written from (every shipped study's variants, and one with every key set away
// from its default), and result.json's variant object reads back to a result that writes the same
// object again.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "common/files.hpp"
#include "common/yaml.hpp"
#include "sim/study/results.hpp"
#include "sim/study/study_file.hpp"
#include "tests/support/test_support.hpp"

using namespace moesim;
namespace fs = std::filesystem;

namespace {

sim::Scenario read_back(const sim::Scenario& s) {
  const auto doc = common::YamlDocument::load_string(sim::scenario_to_yaml(s), "scenario.yaml");
  return sim::parse_scenario(doc.root(), fs::current_path().string());
}

}  // namespace

TEST_CASE("round trip: every shipped study's variants survive scenario.yaml unchanged") {
  int checked = 0;
  for (const char* dir : {"studies", "papers"})
    for (const auto& e : fs::directory_iterator(testing::source_dir() / "configs" / dir)) {
      if (e.path().extension() != ".yaml") continue;
      sim::Study study;
      try {
        study = sim::load_study(e.path().string());
      } catch (const common::InputError&) {
        continue;  // a paper study whose generated traces are not made yet (tools/paper-traces.sh)
      }
      for (const auto& v : study.variants) {
        INFO(e.path().string() << " variant " << v.name);
        CHECK(read_back(v.scenario) == v.scenario);
        ++checked;
      }
    }
  CHECK(checked > 20);
}

TEST_CASE("round trip: a scenario with every key away from its default") {
  sim::Study study = sim::load_study((testing::source_dir() / "configs" / "studies" / "default.yaml").string());
  sim::Scenario s = study.variants.front().scenario;
  s.profile = "h100-sxm";
  s.workload.mode = sim::WorkloadMode::kPrefill;
  s.workload.tokens_per_step = 1234;
  s.workload.batch_sequences = 7;
  s.workload.decode_staggered = false;
  s.workload.steps = 3;
  s.workload.warmup_steps = 2;
  s.workload.micro_batches = 3;
  s.workload.gradient = sim::GradientSync::kFsdp;
  s.workload.batch = 5;
  s.workload.sequence_length = 999;
  s.workload.synthetic_compute = 1.0 / 3.0 * 1e-4;
  s.workload.synthetic_a2a_bytes = 12345.0;
  s.workload.synthetic_layers = 9;
  s.workload.synthetic_overlap = true;
  s.placement.policy = "eplb";
  s.placement.replicas = 8;
  s.placement.groups = 2;
  s.overlap.policy = sim::OverlapPolicy::kIdeal;
  s.overlap.chunks = 3;
  s.overlap.timelines = sim::Timelines::kRequested;
  s.dispatch = sim::DispatchMode::kHierarchical;
  s.dispatch_sms = 0;
  s.dispatch_pieces = 3;
  s.power_cap = 433.3;
  s.clock_limit = 1.41e9;
  s.seed = 42;
  s.simgrid_cfg = {"network/model:CM02", "network/latency-factor:1.5"};
  CHECK(read_back(s) == s);
  // And the comparison sees a change: the test would catch a field that is not written.
  sim::Scenario other = s;
  other.workload.synthetic_overlap = false;
  CHECK_FALSE(read_back(other) == s);
}

TEST_CASE("round trip: result.json's variant object reads back and writes the same object") {
  sim::VariantResult v;
  v.name = "a-variant";
  v.assignments = {{"overlap.policy", "overlapped"}};
  v.scenario.architecture = "deepseek-v2-lite";
  v.scenario.cluster = "h100-sxm-8gpu";
  v.scenario.tp = 1;
  v.scenario.ep = 8;
  v.scenario.workload.mode = sim::WorkloadMode::kDecode;
  v.scenario.workload.steps = 5;
  v.scenario.overlap.policy = sim::OverlapPolicy::kOverlapped;
  v.scenario.dispatch = sim::DispatchMode::kHierarchical;
  v.scenario.power_cap = 450;
  v.profile_name = "h100-sxm";
  v.profile_sources = {"published", "model"};
  v.inputs = {{"trace_sha256", "abc"}};
  v.placement_file = "placements/x.yaml";
  v.auto_decisions = nlohmann::json::array({{{"layer", 1}}});
  double x = 0.001;
  for (const auto& c : sim::kMetricColumns) v.summary.*c.field = (x *= 1.7);
  v.summary.chunking_cost = std::numeric_limits<double>::quiet_NaN();
  v.timelines.emplace_back();
  v.timelines.front().trace_repeated = true;
  const nlohmann::json j = sim::variant_json(v, false);
  const sim::VariantResult back = sim::variant_result_from_json(j, "result.json");
  CHECK(sim::variant_json(back, false) == j);
  CHECK(std::isnan(back.summary.chunking_cost));
  CHECK(back.summary.p99 == v.summary.p99);
  CHECK(back.scenario.dispatch == sim::DispatchMode::kHierarchical);
  // A missing metric is an error naming its JSON path.
  nlohmann::json broken = j;
  broken["step_latency_s"].erase("p90");
  CHECK(testing::error_of([&] { sim::variant_result_from_json(broken, "result.json"); })
            .find("step_latency_s.p90") != std::string::npos);
}
