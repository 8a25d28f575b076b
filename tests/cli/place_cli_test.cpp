// `moesim place`, `place evaluate`, `place compare` and `place export` as a user runs them on the
// shipped DeepSeek-V2-Lite trace: every policy writes a loadable file, evaluation and comparison give
// real figures, exports have the engines' shapes, bad inputs exit 2 naming the problem.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.hpp"

using moesim::testing::CliResult;
using moesim::testing::run_moesim;
using moesim::testing::TempDir;

namespace {

std::string shipped_trace() {
  return (moesim::testing::source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string();
}
std::string data(const std::string& name) { return (moesim::testing::test_data_dir() / "placements" / name).string(); }
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

CliResult place(const TempDir& dir, const std::string& policy, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"place",
                                   "--trace",
                                   shipped_trace(),
                                   "--architecture",
                                   "deepseek-v2-lite",
                                   "--cluster",
                                   "h100-sxm-8gpu",
                                   "--policy",
                                   policy,
                                   "-o",
                                   (dir / (policy + ".yaml")).string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_moesim(args);
}

}  // namespace

TEST_CASE("cli place: every policy writes a placement file that evaluates") {
  TempDir dir;
  for (const std::string policy :
       {"contiguous", "round_robin", "random", "greedy", "eplb", "moetuner", "moetuner_equal"}) {
    const CliResult r = place(dir, policy);
    CAPTURE(policy);
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(contains(r.out, "wrote "));
    CHECK(std::filesystem::exists(dir / (policy + ".yaml")));
  }
  const CliResult m = run_moesim({"place", "evaluate", "--placement", (dir / "moetuner.yaml").string(), "--trace",
                                  shipped_trace(), "--no-simulate", "--json"});
  CAPTURE(m.err);
  REQUIRE(m.exit_code == 0);
  const auto j = nlohmann::json::parse(m.out);
  CHECK(j["layers"].size() == 26);
  CHECK(j["mean_max_over_mean"].get<double>() >= 1.0);
  CHECK(j["solver_report"]["stage2"].contains("bound"));

  const CliResult c =
      run_moesim({"place", "compare", "--placements", (dir / "contiguous.yaml").string(), (dir / "eplb.yaml").string(),
                  (dir / "moetuner.yaml").string(), "--trace", shipped_trace(), "--no-simulate", "--json"});
  CAPTURE(c.err);
  REQUIRE(c.exit_code == 0);
  const auto cj = nlohmann::json::parse(c.out);
  REQUIRE(cj["placements"].size() == 3);
  CHECK(cj["placements"][2]["sum_layer_max_load"].get<double>() <
        cj["placements"][0]["sum_layer_max_load"].get<double>());

  // The no-overwrite rule.
  CHECK(place(dir, "greedy").exit_code == 2);
  CHECK(place(dir, "greedy", {"--force"}).exit_code == 0);
}

TEST_CASE("cli place evaluate: simulated figures from the default study") {
  TempDir dir;
  REQUIRE(place(dir, "greedy").exit_code == 0);
  const CliResult r = run_moesim(
      {"place", "evaluate", "--placement", (dir / "greedy.yaml").string(), "--trace", shipped_trace(), "--steps", "3"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.out, "token tail us"));
  CHECK(contains(r.out, "simulated (default study): step p50"));
}

TEST_CASE("cli place export: vllm, sglang and megatron") {
  TempDir dir;
  REQUIRE(place(dir, "eplb", {"--replicas", "8"}).exit_code == 0);
  for (const std::string format : {"vllm", "sglang", "megatron"}) {
    const std::string out = (dir / (format + ".json")).string();
    const CliResult r =
        run_moesim({"place", "export", "--placement", (dir / "eplb.yaml").string(), "--format", format, "-o", out});
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(moesim::testing::read_text(out));
    CHECK(j["format"] == format);
    if (format != "megatron") CHECK(j["physical_to_logical_map"][0].size() == 72);
  }
}

TEST_CASE("cli place: bad inputs exit 2 with the problem named") {
  TempDir dir;
  const std::string out = (dir / "x.json").string();
  CliResult r = run_moesim(
      {"place", "export", "--placement", data("bad_placement_memory.yaml"), "--format", "megatron", "-o", out});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "holds 256 routed experts"));
  r = run_moesim(
      {"place", "export", "--placement", data("bad_placement_expert_missing.yaml"), "--format", "vllm", "-o", out});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "bad_placement_expert_missing.yaml"));
  r = run_moesim(
      {"place", "export", "--placement", data("bad_placement_rank_out_of_range.yaml"), "--format", "vllm", "-o", out});
  CHECK(r.exit_code == 2);
  r = run_moesim({"place", "export", "--placement", data("good_contiguous.yaml"), "--format", "vlm", "-o", out});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "did you mean"));
  r = place(dir, "moetunr");
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "moetuner"));
  r = run_moesim({"place", "--architecture", "deepseek-v2-lite", "--cluster", "h100-sxm-8gpu", "--policy", "greedy",
                  "-o", (dir / "g.yaml").string()});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--trace"));
  r = place(dir, "eplb", {"--replicas", "3"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--replicas 8"));
  r = place(dir, "moetuner", {"--ep", "3"});
  CHECK(r.exit_code == 2);
}
