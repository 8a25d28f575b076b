// `moesim place`, `place evaluate`, `place compare` and `place export` as a user runs them on the
// shipped DeepSeek-V2-Lite trace: every policy writes a loadable file, evaluation and comparison give
// real figures, exports are what the engines read, bad inputs exit 2 naming the problem.
#include <algorithm>
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
       {"contiguous", "round_robin", "random", "greedy", "eplb", "moetuner", "moetuner_equal", "exflow"}) {
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

TEST_CASE("cli place: --dispatch residence solves, evaluates and compares from the owner rank") {
  TempDir dir;
  for (const std::string policy : {"contiguous", "exflow"}) {
    const CliResult r = place(dir, policy, {"--dispatch", "residence"});
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
  }
  const CliResult tuned = place(dir, "moetuner", {"--dispatch", "residence"});
  CAPTURE(tuned.err);
  REQUIRE(tuned.exit_code == 0);
  const std::string exflow = (dir / "exflow.yaml").string(), contiguous = (dir / "contiguous.yaml").string();
  const CliResult e = run_moesim({"place", "evaluate", "--placement", exflow, "--trace", shipped_trace(),
                                  "--no-simulate", "--dispatch", "residence"});
  CAPTURE(e.err);
  REQUIRE(e.exit_code == 0);
  CHECK(contains(e.out, "residence dispatch"));
  const CliResult flat =
      run_moesim({"place", "evaluate", "--placement", exflow, "--trace", shipped_trace(), "--no-simulate"});
  REQUIRE(flat.exit_code == 0);
  CHECK(contains(flat.out, "flat dispatch"));

  const CliResult c = run_moesim({"place", "compare", "--placements", contiguous, exflow, "--trace", shipped_trace(),
                                  "--no-simulate", "--dispatch", "residence", "--json"});
  CAPTURE(c.err);
  REQUIRE(c.exit_code == 0);
  const auto cj = nlohmann::json::parse(c.out);
  CHECK(cj["dispatch"] == "residence");
  REQUIRE(cj["placements"].size() == 2);
  CHECK(cj["placements"][1]["dispatch"] == "residence");
  // One node: no bytes between nodes, and exflow moves fewer tokens between GPUs than contiguous.
  CHECK(cj["placements"][1]["bytes_off_node"].get<double>() == 0.0);
  CHECK(cj["placements"][1]["sends"].get<double>() < cj["placements"][0]["sends"].get<double>());

  const CliResult bad = run_moesim({"place", "evaluate", "--placement", exflow, "--trace", shipped_trace(),
                                    "--no-simulate", "--dispatch", "sideways"});
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, "--dispatch: expected flat or residence, got \"sideways\""));
  // Simulated in the mode it is counted in: the default study's decode with residence dispatch.
  const CliResult simulated = run_moesim({"place", "evaluate", "--placement", exflow, "--trace", shipped_trace(),
                                          "--dispatch", "residence", "--steps", "3", "--json"});
  CAPTURE(simulated.err);
  REQUIRE(simulated.exit_code == 0);
  const auto sj = nlohmann::json::parse(simulated.out);
  CHECK(sj["dispatch"] == "residence");
  CHECK(sj["simulated"]["step_p50_s"].get<double>() > 0.0);
  CHECK(place(dir, "exflow", {"--dispatch", "both", "--force"}).exit_code == 2);
}

TEST_CASE("cli place export: the SGLang and vllm-ascend files, the vLLM / Megatron options, the permutation") {
  TempDir dir;
  REQUIRE(place(dir, "eplb", {"--replicas", "8"}).exit_code == 0);
  const std::string eplb = (dir / "eplb.yaml").string();
  // SGLang: only physical_to_logical_map, one row per decoder layer (27, layer 0 dense), 64 + 8 slots;
  // the launch options name the file and the redundant experts.
  const std::string out = (dir / "eplb-sglang.json").string();
  CliResult r = run_moesim({"place", "export", "--placement", eplb, "--format", "sglang", "-o", out});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(moesim::testing::read_text(out));
  CHECK(j.size() == 1);
  REQUIRE(j["physical_to_logical_map"].size() == 27);
  for (const auto& row : j["physical_to_logical_map"]) CHECK(row.size() == 72);
  CHECK(contains(r.out, "--init-expert-location " + out + " --ep-num-redundant-experts 8 --tp-size 8 --ep-size 8"));
  // vllm-ascend: its own file, one entry per MoE layer, named in --additional-config.
  const std::string ascend = (dir / "eplb-ascend.json").string();
  r = run_moesim({"place", "export", "--placement", eplb, "--format", "vllm-ascend", "-o", ascend});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const auto a = nlohmann::json::parse(moesim::testing::read_text(ascend));
  CHECK(a["moe_layer_count"] == 26);
  CHECK(a["layer_list"][0]["device_list"][0]["device_expert"].size() == 9);
  CHECK(contains(r.out, "--additional-config '{\"expert_map_path\": \"" + ascend + "\"}'"));
  // vLLM loads no map: the replicated placement is refused, pointing to SGLang; no file is written.
  r = run_moesim({"place", "export", "--placement", eplb, "--format", "vllm"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "vLLM loads no initial expert map"));
  CHECK(contains(r.err, "--format sglang"));
  r = run_moesim({"place", "export", "--placement", eplb, "--format", "vllm", "-o", (dir / "v.json").string()});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "writes no file"));
  CHECK_FALSE(std::filesystem::exists(dir / "v.json"));
  r = run_moesim({"place", "export", "--placement", eplb, "--format", "megatron"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "one copy of every expert"));

  // Contiguous: vLLM's linear layout and Megatron-Core's own.
  const CliResult c = run_moesim({"place", "--architecture", "deepseek-v2-lite", "--cluster", "h100-sxm-8gpu",
                                  "--policy", "contiguous", "-o", (dir / "contig.yaml").string()});
  REQUIRE(c.exit_code == 0);
  r = run_moesim({"place", "export", "--placement", (dir / "contig.yaml").string(), "--format", "vllm"});
  CHECK(r.exit_code == 0);
  CHECK(contains(r.out, "--enable-expert-parallel --expert-placement-strategy linear"));
  r = run_moesim({"place", "export", "--placement", (dir / "contig.yaml").string(), "--format", "megatron"});
  CHECK(r.exit_code == 0);
  CHECK(contains(r.out, "--num-experts 64 --expert-model-parallel-size 8"));

  // Round-robin on a model with expert groups: vLLM's round_robin; a shuffle: a permutation, whose
  // order puts each rank's experts in its contiguous block.
  r = run_moesim({"place", "export", "--placement", data("export/round_robin_grouped.yaml"), "--format", "vllm"});
  CHECK(r.exit_code == 0);
  CHECK(contains(r.out, "--expert-placement-strategy round_robin"));
  r = run_moesim({"place", "export", "--placement", data("export/shuffled.yaml"), "--format", "vllm"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--format permutation"));
  const std::string perm = (dir / "perm.json").string();
  r = run_moesim(
      {"place", "export", "--placement", data("export/shuffled.yaml"), "--format", "permutation", "-o", perm});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const auto p = nlohmann::json::parse(moesim::testing::read_text(perm));
  REQUIRE(p["layers"].size() == 3);
  CHECK(p["layers"][0]["layer"] == 1);
  // shuffled.yaml: rank 0 [2, 5], rank 1 [0, 7], rank 2 [3, 6], rank 3 [1, 4] (2 per rank).
  CHECK(p["layers"][0]["order"] == nlohmann::json::array({2, 5, 0, 7, 3, 6, 1, 4}));

  // SGLang needs a .json name (it parses any other value as inline JSON) and equal slots per rank.
  r = run_moesim({"place", "export", "--placement", eplb, "--format", "sglang", "-o", (dir / "e.map").string()});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "inline JSON"));
  r = run_moesim({"place", "export", "--placement", data("good_replicated.yaml"), "--format", "sglang", "-o",
                  (dir / "u.json").string()});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "good_replicated.yaml: layer 1: rank 1 holds 2 experts"));
  CHECK_FALSE(std::filesystem::exists(dir / "u.json"));
}

TEST_CASE("cli place: bad inputs exit 2 with the problem named") {
  TempDir dir;
  const std::string out = (dir / "x.json").string();
  CliResult r = run_moesim(
      {"place", "export", "--placement", data("bad_placement_memory.yaml"), "--format", "permutation", "-o", out});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "holds 256 routed experts"));
  r = run_moesim(
      {"place", "export", "--placement", data("bad_placement_expert_missing.yaml"), "--format", "sglang", "-o", out});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "bad_placement_expert_missing.yaml"));
  r = run_moesim({"place", "export", "--placement", data("bad_placement_rank_out_of_range.yaml"), "--format", "sglang",
                  "-o", out});
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

namespace {

// A second DeepSeek-V2-Lite trace with sharper popularity than the shipped one (different traffic).
std::string generated_trace(const TempDir& dir) {
  const std::string out = (dir / "zipf.mtr").string();
  const CliResult r = run_moesim({"trace", "generate", "--architecture", "deepseek-v2-lite", "--tokens", "3k", "--seed",
                                  "5", "--zipf", "1.2", "-o", out});
  REQUIRE(r.exit_code == 0);
  return out;
}

CliResult place_over(const TempDir& dir, const std::string& policy, const std::string& name,
                     std::vector<std::string> extra) {
  std::vector<std::string> args = {"place",  "--architecture", "deepseek-v2-lite", "--cluster", "h100-sxm-8gpu",
                                   "--policy", policy,          "-o",               (dir / name).string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_moesim(args);
}

// The robust block of a placement file's report.
nlohmann::json robust_report(const std::string& file) {
  const CliResult r = run_moesim({"place", "evaluate", "--placement", file, "--trace", shipped_trace(), "--no-simulate",
                                  "--json"});
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out)["solver_report"]["robust"];
}

}  // namespace

TEST_CASE("cli place: several traces, expected objective with weights") {
  TempDir dir;
  const std::string b = generated_trace(dir);
  const CliResult r = place_over(dir, "greedy", "mix.yaml",
                                 {"--trace", shipped_trace(), "--trace", b, "--weight", "1", "--weight", "3"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.out, "objective expected over 2 traces (weights 0.25 0.75)"));
  CHECK(contains(r.out, "<- chosen"));
  const std::string file = (dir / "mix.yaml").string();
  CHECK_FALSE(contains(moesim::testing::read_text(file), "trace_sha256:"));  // solved on no single trace
  const auto robust = robust_report(file);
  CHECK(robust["objective"] == "expected");
  REQUIRE(robust["traces"].size() == 2);
  CHECK(robust["traces"][0]["file"] == shipped_trace());
  CHECK(robust["traces"][0]["sha256"].get<std::string>().size() == 64);
  CHECK(robust["traces"][1]["tokens"] == 3000);
  CHECK(robust["traces"][1]["weight"].get<double>() == doctest::Approx(0.75));
  REQUIRE(robust["candidates"].size() == 1);
  CHECK(robust["candidates"][0]["solved_on"] == "mix");
  CHECK(robust["chosen"] == 0);
  // The per-trace scores are place evaluate's max/mean on each trace.
  for (std::size_t i = 0; i < 2; ++i) {
    const CliResult e = run_moesim({"place", "evaluate", "--placement", file, "--trace",
                                    robust["traces"][i]["file"].get<std::string>(), "--no-simulate", "--json"});
    REQUIRE(e.exit_code == 0);
    CHECK(robust["candidates"][0]["scores"][i].get<double>() ==
          doctest::Approx(nlohmann::json::parse(e.out)["mean_max_over_mean"].get<double>()));
  }
}

TEST_CASE("cli place: several traces, worst objective keeps the candidate with the least worst score") {
  TempDir dir;
  const std::string b = generated_trace(dir);
  const CliResult r = place_over(dir, "greedy", "worst.yaml",
                                 {"--trace", shipped_trace(), "--trace", b, "--objective", "worst"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.out, "objective worst over 2 traces"));
  const auto robust = robust_report((dir / "worst.yaml").string());
  CHECK(robust["objective"] == "worst");
  const auto& candidates = robust["candidates"];
  REQUIRE(candidates.size() == 3);  // the mix, then each trace alone
  CHECK(candidates[0]["solved_on"] == "mix");
  CHECK(candidates[2]["solved_on"] == b);
  const std::size_t chosen = robust["chosen"].get<std::size_t>();
  REQUIRE(chosen < 3);
  const double chosen_worst = candidates[chosen]["worst"].get<double>();
  for (const auto& c : candidates) {
    REQUIRE(c["scores"].size() == 2);
    const double worst = std::max(c["scores"][0].get<double>(), c["scores"][1].get<double>());
    CHECK(c["worst"].get<double>() == doctest::Approx(worst));
    CHECK(chosen_worst <= worst);
  }
  CHECK(contains(robust["note"].get<std::string>(), "not an exact minimax solve"));
}

TEST_CASE("cli place: several traces with a policy that reads no routing") {
  TempDir dir;
  const std::string b = generated_trace(dir);
  const CliResult r = place_over(dir, "contiguous", "c.yaml", {"--trace", shipped_trace(), "--trace", b});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.out, "nothing to combine"));
  const auto robust = robust_report((dir / "c.yaml").string());
  REQUIRE(robust["candidates"].size() == 1);
  CHECK(robust["candidates"][0]["scores"].size() == 2);
}

TEST_CASE("cli place: one trace gives the same file with or without --weight and --objective") {
  TempDir dir;
  REQUIRE(place_over(dir, "greedy", "plain.yaml", {"--trace", shipped_trace()}).exit_code == 0);
  REQUIRE(place_over(dir, "greedy", "opts.yaml", {"--trace", shipped_trace(), "--weight", "2", "--objective", "worst"})
              .exit_code == 0);
  const std::string plain = moesim::testing::read_text(dir / "plain.yaml");
  CHECK(plain == moesim::testing::read_text(dir / "opts.yaml"));
  CHECK(contains(plain, "trace_sha256:"));
  CHECK_FALSE(contains(plain, "robust"));
}

TEST_CASE("cli place: bad weights, objectives and traces over several traces exit 2 naming the problem") {
  TempDir dir;
  const std::string b = generated_trace(dir);
  auto check = [&](std::vector<std::string> extra, const std::string& part) {
    const CliResult r = place_over(dir, "greedy", "bad.yaml", extra);
    CAPTURE(part);
    CAPTURE(r.err);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, part));
    CHECK_FALSE(std::filesystem::exists(dir / "bad.yaml"));
  };
  const std::vector<std::string> two = {"--trace", shipped_trace(), "--trace", b};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), two.begin(), two.end());
    return extra;
  };
  check(with({"--weight", "1"}), "--weight: given 1 times for 2 --trace");
  check(with({"--weight", "1", "--weight", "2", "--weight", "3"}), "one --weight per --trace");
  check(with({"--weight", "1", "--weight=-2"}),
        "--weight: expected a positive finite number such as 0.5 or 3, got \"-2\"");
  check(with({"--weight", "0", "--weight", "1"}), "got \"0\"");
  check(with({"--weight", "1", "--weight", "inf"}), "got \"inf\"");
  check(with({"--weight", "1", "--weight", "2x"}), "got \"2x\"");
  check(with({"--objective", "wrst"}), "did you mean \"worst\"");
  const std::string other = (moesim::testing::test_data_dir() / "traces" / "sample_small.mtr").string();
  check({"--trace", shipped_trace(), "--trace", other}, other + ": expected a trace of");
  check({"--trace", other}, other + ": expected a trace of");
}
