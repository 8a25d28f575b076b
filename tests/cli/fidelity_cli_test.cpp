// `network.fidelity` (docs/simulator.md, "Network fidelity"): `flow` runs every transfer as its own
// SimGrid flow, `auto` lets the engine aggregate where that is exact; results.json says which ran,
// and both give the same simulated times where the aggregation applies. A bad value is refused with
// the study file's line.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::read_text;
using moesim::testing::run_moesim;
using moesim::testing::TempDir;
using moesim::testing::write_text;

namespace {

std::string synthetic_study(const std::string& cluster, const std::string& extra) {
  return "schema_version: 1\nkind: study\nname: fidelity\nbase:\n"
         "  architecture: mixtral-8x7b\n  cluster: " + cluster + "\n  trace: none\n"
         "  workload: {mode: synthetic, steps: 2, synthetic: {compute: 50us, a2a_bytes: 2MiB, layers: 3}}\n"
         "  placement: {policy: contiguous}\n  overlap: {policy: sequential, timelines: requested}\n" + extra;
}

// Runs a study written to tmp/s.yaml; its results.json.
nlohmann::json run_study(const TempDir& tmp, const std::string& yaml) {
  write_text(tmp / "s.yaml", yaml);
  const auto r = run_moesim({"run", (tmp / "s.yaml").string(), "-o", (tmp / "out").string(), "-q"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  return nlohmann::json::parse(read_text(tmp / "out" / "results.json"));
}

const nlohmann::json& variant(const nlohmann::json& doc, const std::string& name) {
  for (const auto& v : doc.at("variants"))
    if (v.at("name") == name) return v;
  FAIL("no variant " << name);
  return doc;
}

}  // namespace

TEST_CASE("network.fidelity: flow and auto give the same times on one switch node, and say which ran") {
  TempDir tmp;
  const auto doc = run_study(tmp, synthetic_study("h100-sxm-8gpu", "sweep:\n  network.fidelity: [auto, flow]\n"));
  const auto& fast = variant(doc, "auto");
  const auto& flow = variant(doc, "flow");
  CHECK(fast.at("inputs").at("network_fidelity") == "auto");
  CHECK(flow.at("inputs").at("network_fidelity") == "flow");
  CHECK(fast.at("network_fidelity_ran") == "aggregated");
  CHECK(flow.at("network_fidelity_ran") == "flow");
  const double a = fast.at("step_latency_s").at("mean").get<double>();
  const double b = flow.at("step_latency_s").at("mean").get<double>();
  CHECK(a > 0.0);
  CHECK(a == doctest::Approx(b).epsilon(1e-9));
}

TEST_CASE("network.fidelity: auto runs the fluid network where aggregation is not exact (two nodes), at flow's times") {
  TempDir tmp;
  const auto doc = run_study(tmp, synthetic_study("h200-2x8-800g", "sweep:\n  network.fidelity: [auto, flow]\n"));
  const auto& fast = variant(doc, "auto");
  const auto& flow = variant(doc, "flow");
  CHECK(fast.at("inputs").at("network_fidelity") == "auto");
  CHECK(fast.at("network_fidelity_ran") == "fluid");
  CHECK(flow.at("network_fidelity_ran") == "flow");
  const double a = fast.at("step_latency_s").at("mean").get<double>();
  const double b = flow.at("step_latency_s").at("mean").get<double>();
  CHECK(a > 0.0);
  CHECK(a == doctest::Approx(b).epsilon(1e-6));
}

TEST_CASE("network.fidelity: fluid moves every transfer in the fluid network, none aggregated, at the same times") {
  TempDir tmp;
  const auto doc = run_study(tmp, synthetic_study("h100-sxm-8gpu", "sweep:\n  network.fidelity: [auto, fluid]\n"));
  const auto& fast = variant(doc, "auto");
  const auto& fluid = variant(doc, "fluid");
  CHECK(fast.at("network_fidelity_ran") == "aggregated");
  CHECK(fluid.at("inputs").at("network_fidelity") == "fluid");
  CHECK(fluid.at("network_fidelity_ran") == "fluid");
  const double a = fast.at("step_latency_s").at("mean").get<double>();
  const double b = fluid.at("step_latency_s").at("mean").get<double>();
  CHECK(a > 0.0);
  CHECK(b == doctest::Approx(a).epsilon(1e-9));
}

TEST_CASE("network.fidelity: fluid with a SimGrid setting is refused, naming the setting and the fix") {
  TempDir tmp;
  write_text(tmp / "s.yaml", synthetic_study("h200-2x8-800g", "  simgrid: [\"maxmin/precision:1e-6\"]\n  network: {fidelity: fluid}\n"));
  const auto r = run_moesim({"run", (tmp / "s.yaml").string(), "-o", (tmp / "out").string(), "-q"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("maxmin/precision:1e-6") != std::string::npos);
  CHECK(r.err.find("network.fidelity flow") != std::string::npos);
  CHECK(!fs::exists(tmp / "out" / "results.json"));
}

TEST_CASE("network.fidelity: a SimGrid setting of the study keeps SimGrid's flows under auto") {
  TempDir tmp;
  const auto doc = run_study(tmp, synthetic_study("h200-2x8-800g", "  simgrid: [\"maxmin/precision:1e-6\"]\n"));
  CHECK(doc.at("variants").at(0).at("network_fidelity_ran") == "flow");
}

TEST_CASE("network.fidelity: an unknown value or key is refused with the file's line and the choices") {
  TempDir tmp;
  write_text(tmp / "s.yaml", synthetic_study("h100-sxm-8gpu", "") + "  network: {fidelity: packet}\n");
  const auto r = run_moesim({"run", (tmp / "s.yaml").string(), "-o", (tmp / "out").string(), "-q"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("s.yaml:11") != std::string::npos);
  CHECK(r.err.find("auto") != std::string::npos);
  CHECK(r.err.find("flow") != std::string::npos);
  CHECK(!fs::exists(tmp / "out" / "results.json"));

  write_text(tmp / "t.yaml", synthetic_study("h100-sxm-8gpu", "") + "  network: {fidelty: flow}\n");
  const auto t = run_moesim({"run", (tmp / "t.yaml").string(), "-o", (tmp / "out2").string(), "-q"});
  CHECK(t.exit_code == 2);
  CHECK(t.err.find("t.yaml:11") != std::string::npos);
  CHECK(t.err.find("fidelity") != std::string::npos);
}
