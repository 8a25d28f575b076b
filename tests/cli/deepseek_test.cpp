// DeepSeek-V3 on H800 as DeepSeek published it (docs/validation.md, "DeepSeek-V3 on H800"): runs the
// two shipped studies through the real `moesim run`, requires the doc's two marked tables to be what
// tools/paper-tables.sh prints from these runs (the numbers are current), and checks the physics the
// tables rest on. `trace: balanced` is also checked where a user meets it: refusals and the
// resolved scenario.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::marked_lines;
using moesim::testing::read_text;
using moesim::testing::run_moesim;
using moesim::testing::run_program;
using moesim::testing::source_dir;
using moesim::testing::TempDir;
using moesim::testing::write_text;

namespace {

nlohmann::json only_variant(const fs::path& out) {
  const auto doc = nlohmann::json::parse(read_text(out / "results.json"));
  REQUIRE(doc["variants"].size() == 1);
  return doc["variants"][0];
}

}  // namespace

TEST_CASE("papers: the deepseek-v3 tables of docs/validation.md are what the shipped studies give now") {
  const fs::path python = "/usr/bin/python3";
  if (!fs::exists(python)) {
    MESSAGE("skipped: no /usr/bin/python3 for tools/paper-tables.sh");
    return;
  }
  TempDir dir;
  const fs::path prefill = dir / "prefill";
  const fs::path decode = dir / "decode";
  const std::vector<std::pair<std::string, fs::path>> runs = {{"deepseek-v3-prefill.yaml", prefill},
                                                               {"deepseek-v3-decode.yaml", decode}};
  for (const auto& [study, out] : runs) {
    const fs::path file = source_dir() / "configs" / "papers" / study;
    const auto r = run_moesim({"run", file.string(), "-o", out.string(), "-q"});
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
  }
  const nlohmann::json p = only_variant(prefill);
  const nlohmann::json d = only_variant(decode);
  // What ran is the deployment as published: balanced routing, no trace replayed, 10 steps or more.
  for (const auto* v : {&p, &d}) {
    CHECK((*v)["inputs"]["routing"] == "balanced");
    CHECK((*v)["trace_repeated"] == false);
    CHECK((*v)["inputs"]["overlap"] == "tbo");
    CHECK((*v)["inputs"]["steps"].get<int>() >= 10);
  }
  CHECK(p["dispatch_mode_ran"] == "hierarchical");
  CHECK(d["dispatch_mode_ran"] == "low_latency");
  CHECK(d["network_fidelity_ran"] == "ports");
  // Decode's all-to-all holds no SM: its compute is never slowed; prefill's normal kernels hold SMs.
  CHECK(std::abs(d["compute_slowdown"].get<double>()) < 1e-6);  // zero but for the sums' rounding
  CHECK(p["compute_slowdown"].get<double>() > 0.0);
  // Every MoE layer's routed experts get the same tokens on every GPU (balanced routing).
  const fs::path variant = prefill / "variants" / p["name"].get<std::string>();
  const auto full = nlohmann::json::parse(read_text(variant / "result.json"));
  REQUIRE(full["variant"]["timelines"].size() == 1);
  for (const auto& layer : full["variant"]["timelines"][0]["layers"]) {
    if (!layer["moe"].get<bool>()) continue;
    const auto& ranks = layer["rank_tokens"];
    for (const auto& r : ranks) CHECK(r.get<double>() == ranks[0].get<double>());
  }
  // Decode within the bound of DeepSeek's published 2,325 tokens/s per GPU.
  const double decode_per_gpu = d["throughput_tokens_per_s"].get<double>() / 128.0;
  CHECK(decode_per_gpu == doctest::Approx(2325.0).epsilon(0.10));

  const auto r = run_program("/bin/sh", {(source_dir() / "tools" / "paper-tables.sh").string(), "deepseek",
                                         prefill.string(), decode.string()});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const auto doc = read_text(source_dir() / "docs" / "validation.md");
  for (const char* table : {"deepseek-v3", "deepseek-v3-breakdown"}) {
    CAPTURE(table);
    const auto want = marked_lines(r.out, table);
    const auto have = marked_lines(doc, table);
    CHECK_MESSAGE(want == have, "regenerate: sh tools/paper-tables.sh deepseek PREFILL_OUT DECODE_OUT "
                                "(docs/validation.md, DeepSeek-V3 on H800)");
    for (std::size_t i = 0; i < std::min(want.size(), have.size()); ++i) CHECK(want[i] == have[i]);
  }
}

TEST_CASE("trace: balanced is refused where it has no meaning, and a run says what it ran") {
  TempDir dir;
  auto study = [&](const std::string& name, const std::string& base) {
    const fs::path f = dir / (name + ".yaml");
    write_text(f, "schema_version: 1\nkind: study\nbase:\n" + base);
    return f.string();
  };
  const std::string v2 = "  architecture: deepseek-v2-lite\n  cluster: h100-sxm-8gpu\n  trace: balanced\n";
  // Training, a dense model and a policy that reads routing statistics: each a clear error, exit 2.
  const auto training = run_moesim({"run", study("training", v2 + "  workload: {mode: training}\n"), "--check"});
  CHECK(training.exit_code == 2);
  CHECK(training.err.find("trace: balanced only for prefill or decode") != std::string::npos);
  const auto dense = run_moesim({"run", study("dense", "  architecture: llama2-13b\n  cluster: h100-sxm-8gpu\n"
                                                       "  trace: balanced\n  workload: {mode: prefill}\n"), "--check"});
  CHECK(dense.exit_code == 2);
  CHECK(dense.err.find("of an MoE model") != std::string::npos);
  const auto eplb = run_moesim({"run", study("eplb", v2 + "  workload: {mode: prefill}\n  placement: {policy: eplb}\n"),
                                "--check"});
  CHECK(eplb.exit_code == 2);
  CHECK(eplb.err.find("trace: balanced has no recorded routing") != std::string::npos);

  // A small decode runs; the resolved scenario says trace: balanced and runs again as a study base.
  const fs::path out = dir / "out";
  const auto run = run_moesim({"run", study("decode", v2 + "  workload: {mode: decode, batch_sequences: 64, "
                                                           "sequence_length: 256, steps: 2}\n"),
                               "-o", out.string(), "-q"});
  CAPTURE(run.err);
  REQUIRE(run.exit_code == 0);
  const auto v = only_variant(out);
  CHECK(v["inputs"]["routing"] == "balanced");
  CHECK(v["inputs"]["hashes"].count("trace_sha256") == 0);
  const std::string scenario = read_text(out / "variants" / "base" / "scenario.yaml");
  CHECK(scenario.find("trace: balanced\n") != std::string::npos);
  std::string indented;
  std::stringstream lines(scenario);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] != '#') indented += "  " + line + "\n";
  const fs::path again = dir / "again";
  const auto rerun = run_moesim({"run", study("again", indented), "-o", again.string(), "-q"});
  CAPTURE(rerun.err);
  REQUIRE(rerun.exit_code == 0);
  CHECK(only_variant(again)["step_latency_s"] == v["step_latency_s"]);
}
