// `network.fidelity` (docs/simulator.md, "Network fidelity"): `flow` runs every transfer as its own
// SimGrid flow, `auto` lets the engine aggregate where that is exact; results.json says which ran,
// and both give the same simulated times where the aggregation applies. A bad value is refused with
// the study file's line.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

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

// A traced decode of `sequences` sequences, one step, swept over EP (`eps`) and the three dispatch modes.
std::string dispatch_sweep(const std::string& arch, const std::string& cluster, const std::string& trace, int sequences,
                           const std::string& eps) {
  return "schema_version: 1\nkind: study\nname: dispatch-sweep\nbase:\n  architecture: " + arch +
         "\n  cluster: " + cluster + "\n  trace: " + trace + "\n  parallelism: {tp: 1}\n" +
         "  workload: {mode: decode, batch_sequences: " + std::to_string(sequences) + ", steps: 1}\n" +
         "  placement: {policy: contiguous}\n  overlap: {policy: sequential, timelines: requested}\n" +
         "sweep:\n  parallelism.ep: [" + eps + "]\n  dispatch.mode: [flat, hierarchical, low_latency]\n";
}

const nlohmann::json& variant(const nlohmann::json& doc, const std::string& name) {
  for (const auto& v : doc.at("variants"))
    if (v.at("name") == name) return v;
  FAIL("no variant " << name);
  return doc;
}

// Runs `cluster`'s synthetic study under fidelities `a` and `b`; each variant must say what it was
// asked and what ran, and their mean step times agree to `rel`.
void check_pair(const std::string& cluster, const std::string& a, const std::string& ran_a, const std::string& b,
                const std::string& ran_b, double rel) {
  TempDir tmp;
  const auto doc = run_study(tmp, synthetic_study(cluster, "sweep:\n  network.fidelity: [" + a + ", " + b + "]\n"));
  const auto& va = variant(doc, a);
  const auto& vb = variant(doc, b);
  CHECK(va.at("inputs").at("network_fidelity") == a);
  CHECK(vb.at("inputs").at("network_fidelity") == b);
  CHECK(va.at("network_fidelity_ran") == ran_a);
  CHECK(vb.at("network_fidelity_ran") == ran_b);
  const double ta = va.at("step_latency_s").at("mean").get<double>();
  const double tb = vb.at("step_latency_s").at("mean").get<double>();
  CHECK(ta > 0.0);
  CHECK(ta == doctest::Approx(tb).epsilon(rel));
}

}  // namespace

TEST_CASE("network.fidelity: flow and auto give the same times on one switch node, and say which ran") {
  check_pair("h100-sxm-8gpu", "auto", "aggregated", "flow", "flow", 1e-9);
}

TEST_CASE("network.fidelity: auto runs the fluid network where aggregation is not exact (two nodes), at flow's times") {
  check_pair("h200-2x8-800g", "auto", "fluid", "flow", "flow", 1e-6);
}

TEST_CASE("network.fidelity: fluid moves every transfer in the fluid network, none aggregated, at the same times") {
  check_pair("h100-sxm-8gpu", "auto", "aggregated", "fluid", "fluid", 1e-9);
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

TEST_CASE("network.tolerance: epochs of the fluid network keep a traced decode on two nodes within 2% of flow") {
  // DeepSeek-V2-Lite's shipped trace on 2 x 8 H200, flat dispatch, decode of 256 sequences: every
  // all-to-all is a few hundred flows of different sizes. The tolerance is recorded with the result.
  TempDir tmp;
  const std::string trace = (moesim::testing::source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string();
  const std::string yaml =
      "schema_version: 1\nkind: study\nname: tolerance\nbase:\n"
      "  architecture: deepseek-v2-lite\n  cluster: h200-2x8-800g\n  trace: " + trace + "\n"
      "  workload: {mode: decode, batch_sequences: 256, steps: 2}\n"
      "  placement: {policy: contiguous}\n  overlap: {policy: sequential, timelines: requested}\n"
      "variants:\n"
      "  - {name: flow, set: {network.fidelity: flow}}\n"
      "  - {name: exact, set: {network.fidelity: fluid, network.tolerance: 0}}\n"
      "  - {name: epochs, set: {network.fidelity: fluid, network.tolerance: 0.05}}\n"
      "  - {name: auto, set: {network.fidelity: fluid}}\n";
  const auto doc = run_study(tmp, yaml);
  const auto& flow = variant(doc, "flow");
  const auto& exact = variant(doc, "exact");
  const auto& epochs = variant(doc, "epochs");
  const auto& automatic = variant(doc, "auto");
  CHECK(epochs.at("inputs").at("network_tolerance").get<double>() == 0.05);
  CHECK(exact.at("inputs").at("network_tolerance").get<double>() == 0.0);
  CHECK(automatic.at("inputs").at("network_tolerance") == "auto");
  CHECK(epochs.at("network_fidelity_ran") == "fluid");
  CHECK(epochs.at("network_tolerance_ran").get<double>() == 0.05);
  CHECK(exact.at("network_tolerance_ran").get<double>() == 0.0);
  CHECK(flow.at("network_tolerance_ran").get<double>() == 0.0);
  // 16 GPUs: auto solves exactly, the same step as exact to the last bit.
  CHECK(automatic.at("network_tolerance_ran").get<double>() == 0.0);
  CHECK(automatic.at("step_latency_s").at("mean").get<double>() == exact.at("step_latency_s").at("mean").get<double>());
  const double tf = flow.at("step_latency_s").at("mean").get<double>();
  const double te = exact.at("step_latency_s").at("mean").get<double>();
  const double tt = epochs.at("step_latency_s").at("mean").get<double>();
  CHECK(te == doctest::Approx(tf).epsilon(2e-2));
  CHECK(tt == doctest::Approx(tf).epsilon(2e-2));
  CHECK(tt != te);  // it did solve in epochs
}

TEST_CASE("network.tolerance: auto solves in epochs where a flat or low-latency all-to-all spans 64 GPUs, exactly elsewhere") {
  // DeepSeek-V2-Lite (64 experts) on 8 x 8 H200 with EP 64: flat and low-latency dispatch run in
  // epochs of 2%, hierarchical exact; the same study on EP 32 (4 nodes) exact in every mode.
  TempDir tmp;
  const std::string trace = (moesim::testing::source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string();
  const std::string cluster = (moesim::testing::source_dir() / "bench/configs/h200-8x8.yaml").string();
  const auto doc = run_study(tmp, dispatch_sweep("deepseek-v2-lite", cluster, trace, 64, "64, 32"));
  REQUIRE(doc.at("variants").size() == 6);
  for (const auto& v : doc.at("variants")) {
    CAPTURE(v.at("name").get<std::string>());
    CHECK(v.at("inputs").at("network_tolerance") == "auto");
    CHECK(v.at("network_fidelity_ran") == "fluid");
    const bool epochs = v.at("inputs").at("ep").get<int>() == 64 && v.at("dispatch_mode_ran") != "hierarchical";
    CHECK(v.at("network_tolerance_ran").get<double>() == (epochs ? 0.02 : 0.0));
  }
}

TEST_CASE("network.tolerance: a value outside [0, 0.5] is refused with the file's line") {
  TempDir tmp;
  write_text(tmp / "s.yaml", synthetic_study("h100-sxm-8gpu", "") + "  network: {fidelity: fluid, tolerance: 0.7}\n");
  const auto r = run_moesim({"run", (tmp / "s.yaml").string(), "-o", (tmp / "out").string(), "-q"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("s.yaml:11") != std::string::npos);
  CHECK(r.err.find("tolerance") != std::string::npos);
  CHECK(r.err.find("expected auto or a number between 0 and 0.5") != std::string::npos);
  CHECK(!fs::exists(tmp / "out" / "results.json"));
}

namespace {

// DeepSeek-V2-Lite's shipped trace on 8 x 8 H200 (a NIC per GPU, a non-blocking rail network), EP
// 64, decode of 256 sequences: each flat or low-latency all-to-all is a few hundred transfers of
// different sizes across 8 nodes.
std::string traced_study(const std::string& extra) {
  const std::string trace = (moesim::testing::source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string();
  const std::string cluster = (moesim::testing::source_dir() / "bench/configs/h200-8x8.yaml").string();
  return "schema_version: 1\nkind: study\nname: ports\nbase:\n"
         "  architecture: deepseek-v2-lite\n  cluster: " +
         cluster + "\n  trace: " + trace +
         "\n"
         "  parallelism: {tp: 1, ep: 64}\n"
         "  workload: {mode: decode, batch_sequences: 256, steps: 2}\n"
         "  placement: {policy: contiguous}\n  overlap: {policy: sequential, timelines: requested}\n" +
         extra;
}

double mean_step(const nlohmann::json& v) { return v.at("step_latency_s").at("mean").get<double>(); }

// Variants in pairs, the exact fluid network and port phases, each pair with the settings `extra`
// (", key: value, ...") and its names ending in `suffix`: {suffix, extra}.
std::string fluid_and_ports(const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::string out = "variants:\n";
  for (const auto& [suffix, extra] : pairs)
    out += "  - {name: fluid" + suffix + ", set: {network.fidelity: fluid, network.tolerance: 0" + extra + "}}\n" +
           "  - {name: ports" + suffix + ", set: {network.fidelity: ports" + extra + "}}\n";
  return out;
}

// `moesim run` of `yaml` (written to tmp/NAME.yaml, with `extra` arguments) stops with exit 2, its
// message says each of `says`, and it writes no results.
void check_refused(const TempDir& tmp, const std::string& name, const std::string& yaml,
                   const std::vector<std::string>& says, const std::vector<std::string>& extra = {}) {
  write_text(tmp / (name + ".yaml"), yaml);
  std::vector<std::string> args{"run", (tmp / (name + ".yaml")).string(), "-o", (tmp / ("out-" + name)).string(), "-q"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_moesim(args);
  CHECK(r.exit_code == 2);
  for (const auto& text : says) CHECK_MESSAGE(r.err.find(text) != std::string::npos, text << " in: " << r.err);
  CHECK(!fs::exists(tmp / ("out-" + name) / "results.json"));
}

// Port phases ran, and their step and energy are within 3% of the exact fluid network's
// (docs/simulator.md, "Port phases").
void check_near(const nlohmann::json& fluid, const nlohmann::json& ports) {
  CHECK(ports.at("network_fidelity_ran") == "ports");
  CHECK(mean_step(ports) == doctest::Approx(mean_step(fluid)).epsilon(3e-2));
  CHECK(ports.at("energy_per_step_J").get<double>() ==
        doctest::Approx(fluid.at("energy_per_step_J").get<double>()).epsilon(3e-2));
}

// The engine's figures of a variant's (one) timeline: activities, traffic.
nlohmann::json variant_result(const TempDir& tmp, const std::string& name) {
  const auto doc = nlohmann::json::parse(read_text(tmp / "out" / "variants" / name / "result.json"));
  return doc.at("variant").at("timelines").at(0);
}

}  // namespace

TEST_CASE(
    "network.fidelity: ports moves each GPU's part of an all-to-all as port activities, near the exact fluid network") {
  // docs/simulator.md, "Port phases": measured on this case, steps +0.9% (flat) and +2.2% (low
  // latency), energy +0.2% and +1.0%.
  TempDir tmp;
  const auto doc = run_study(tmp, traced_study(fluid_and_ports({{"", ""}, {"-ll", ", dispatch.mode: low_latency"}})));
  for (const std::string mode : {"", "-ll"}) {
    CAPTURE(mode);
    const auto& fluid = variant(doc, "fluid" + mode);
    const auto& ports = variant(doc, "ports" + mode);
    check_near(fluid, ports);
    CHECK(fluid.at("network_fidelity_ran") == "fluid");
    CHECK(ports.at("inputs").at("network_fidelity") == "ports");
    CHECK(mean_step(ports) != mean_step(fluid));  // a model of its own, not the fluid network's flows
    const auto rf = variant_result(tmp, "fluid" + mode);
    const auto rp = variant_result(tmp, "ports" + mode);
    // One activity per GPU end and phase: far fewer than fluid's one per GPU pair.
    CHECK(rp.at("port_activities").get<std::uint64_t>() > 0);
    CHECK(rf.at("port_activities").get<std::uint64_t>() == 0);
    CHECK(rp.at("activities").get<std::uint64_t>() * 3 < rf.at("activities").get<std::uint64_t>());
    // Every byte is counted pair by pair, as the transfers count it.
    const auto tf = rf.at("traffic_bytes").get<std::vector<std::vector<double>>>();
    const auto tp = rp.at("traffic_bytes").get<std::vector<std::vector<double>>>();
    REQUIRE(tf.size() == 64);
    REQUIRE(tp.size() == 64);
    double total = 0.0;
    for (std::size_t a = 0; a < 64; ++a)
      for (std::size_t b = 0; b < 64; ++b) {
        CHECK(tp[a][b] == doctest::Approx(tf[a][b]).epsilon(1e-12));
        total += tf[a][b];
      }
    CHECK(total > 0.0);
  }
}

TEST_CASE("network.fidelity: ports follows the exact fluid network with TP 2 and with the all-to-all overlapped") {
  // The same decode with TP 2 (EP 32: each TP index its own phase) and, at EP 64, with policy
  // overlapped (the phases of a layer's chunks share the ports). Measured +1.5% and +0.65%.
  TempDir tmp;
  const auto doc = run_study(tmp, traced_study(fluid_and_ports({{"-tp2", ", parallelism.tp: 2, parallelism.ep: 32"},
                                                                {"-ov", ", overlap.policy: overlapped"}})));
  for (const std::string what : {"-tp2", "-ov"}) {
    CAPTURE(what);
    check_near(variant(doc, "fluid" + what), variant(doc, "ports" + what));
  }
}

TEST_CASE(
    "network.fidelity: auto moves flat and low-latency all-to-alls of 256 GPUs as port phases, hierarchical ones as "
    "flows") {
  TempDir tmp;
  const auto trace = tmp / "v3.mtr";
  const auto g = run_moesim(
      {"trace", "generate", "--architecture", "deepseek-v3", "--tokens", "512", "--seed", "3", "-o", trace.string()});
  REQUIRE_MESSAGE(g.exit_code == 0, g.err);
  const auto cluster = moesim::testing::source_dir() / "bench/configs/h200-32x8.yaml";
  const auto doc = run_study(tmp, dispatch_sweep("deepseek-v3", cluster.string(), trace.string(), 256, "256, 128"));
  REQUIRE(doc.at("variants").size() == 6);
  for (const auto& v : doc.at("variants")) {
    CAPTURE(v.at("name").get<std::string>());
    CHECK(v.at("inputs").at("network_fidelity") == "auto");
    const bool ports = v.at("inputs").at("ep").get<int>() == 256 && v.at("dispatch_mode_ran") != "hierarchical";
    CHECK(v.at("network_fidelity_ran") == (ports ? "ports" : "fluid"));
    CHECK(mean_step(v) > 0.0);
  }
}

TEST_CASE(
    "network.fidelity: ports is refused with hierarchical dispatch, a mesh cluster and an activity dump, naming the "
    "fix") {
  TempDir tmp;
  check_refused(tmp, "h", traced_study("  dispatch: {mode: hierarchical}\n  network: {fidelity: ports}\n"),
                {"dispatch.mode is hierarchical", "dispatch.mode flat or low_latency"});
  check_refused(tmp, "m", synthetic_study("a100-sxm-4gpu", "  network: {fidelity: ports}\n"),
                {"a100-sxm-4gpu", "choose network.fidelity auto or fluid"});
  check_refused(tmp, "d", traced_study("  network: {fidelity: ports}\n"), {"dump with network.fidelity fluid or flow"},
                {"--dump-activities", (tmp / "steps.dump").string()});
}
