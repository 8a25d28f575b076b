// Residence dispatch as a user runs it (docs/simulator.md, "Residence dispatch"): the default study in
// both dispatch modes, what results.json says about the tokens' sends and the replicated context, and
// a cluster too small for that context refused naming the keys to change.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::read_text;
using moesim::testing::run_moesim;
using moesim::testing::source_dir;
using moesim::testing::TempDir;
using moesim::testing::write_text;

namespace {

std::string default_study() { return (source_dir() / "configs/studies/default.yaml").string(); }

}  // namespace

TEST_CASE("cli residence: the default study in both modes reports fewer sends and the replicated context") {
  TempDir dir;
  const std::string out = (dir / "out").string();
  write_text(dir / "s.yaml", "schema_version: 1\nkind: study\nbase:\n  architecture: deepseek-v2-lite\n"
                             "  cluster: h100-sxm-8gpu\n  profile: h100-sxm\n  trace: \"" +
                                 (source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string() +
                                 "\"\n  workload: {mode: decode, batch_sequences: 64, steps: 5}\n"
                                 "sweep:\n  dispatch.mode: [flat, residence]\nbaseline: flat\n");
  const auto r = run_moesim({"study", (dir / "s.yaml").string(), "-o", out, "-q"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto results = nlohmann::json::parse(read_text(fs::path(out) / "results.json"));
  const nlohmann::json* flat = nullptr;
  const nlohmann::json* res = nullptr;
  for (const auto& v : results.at("variants")) (v.at("dispatch_mode_ran") == "residence" ? res : flat) = &v;
  REQUIRE(flat != nullptr);
  REQUIRE(res != nullptr);
  const auto& ft = flat->at("traffic");
  const auto& rt = res->at("traffic");
  CHECK(rt.at("sends_per_token_layer").get<double>() < ft.at("sends_per_token_layer").get<double>());
  CHECK(rt.at("replicated_context_bytes").get<double>() > 0.0);
  CHECK(rt.at("coherence_bytes_per_step").get<double>() > 0.0);
  CHECK_FALSE(ft.contains("replicated_context_bytes"));
  CHECK(ft.at("inter_node_bytes").get<double>() == 0.0);  // one node
}

TEST_CASE("cli residence: a cluster whose memory cannot hold the replicated context is refused naming the keys") {
  TempDir dir;
  std::string cluster = read_text(source_dir() / "configs/clusters/h100-sxm-8gpu.yaml");
  const auto at = cluster.find("memory:");
  REQUIRE(at != std::string::npos);
  cluster.replace(at, cluster.find('\n', at) - at, "memory: 4GiB");
  write_text(dir / "small.yaml", cluster);
  const auto r = run_moesim({"study", default_study(), "-o", (dir / "out").string(), "-q", "--set",
                             "base.dispatch.mode=residence", "--set", "base.cluster=" + (dir / "small.yaml").string(),
                             "--set", "base.workload.steps=2"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("dispatch.mode residence") != std::string::npos);
  CHECK(r.err.find("workload.batch_sequences") != std::string::npos);
  CHECK(r.err.find("of weights") != std::string::npos);
  // Found while running, after --check's inputs passed: the run takes back what it wrote in its new
  // folder, so the corrected study goes into the same -o without --resume or --force.
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir / "out")) left.push_back(entry.path().filename().string());
  CHECK_MESSAGE(left.empty(), "left behind: " << left.size() << " entries, first " << (left.empty() ? "" : left[0]));
  const auto again = run_moesim({"study", default_study(), "-o", (dir / "out").string(), "--check", "--set",
                                 "base.dispatch.mode=residence"});
  CHECK_MESSAGE(again.exit_code == 0, again.err);
}
