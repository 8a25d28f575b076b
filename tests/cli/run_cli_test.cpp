// `moesim run` as a user runs it: results layout, determinism, goldens, refusal to overwrite,
// --check, --set, and bad studies.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::read_text;
using moesim::testing::run_moesim;
using moesim::testing::source_dir;
using moesim::testing::TempDir;
using moesim::testing::test_data_dir;
using moesim::testing::write_text;

namespace {

std::string small_study() { return (test_data_dir() / "golden" / "small-study.yaml").string(); }

nlohmann::json without_run_info(const fs::path& results_json) {
  auto j = nlohmann::json::parse(read_text(results_json));
  j.erase("run_info");
  j["context"].erase("git_revision");
  j["context"].erase("build_type");
  return j;
}

// Compares two JSON documents: same structure and strings, numbers within a relative tolerance.
void check_close(const nlohmann::json& got, const nlohmann::json& want, const std::string& path, double rel) {
  if (want.is_number() && got.is_number()) {
    const double a = got.get<double>(), b = want.get<double>();
    INFO(path << ": got " << a << ", golden " << b);
    CHECK(std::fabs(a - b) <= rel * std::max(std::fabs(a), std::fabs(b)) + 1e-300);
    return;
  }
  INFO(path);
  REQUIRE(got.type() == want.type());
  if (want.is_object()) {
    REQUIRE(got.size() == want.size());
    for (auto it = want.begin(); it != want.end(); ++it) {
      REQUIRE(got.contains(it.key()));
      check_close(got[it.key()], it.value(), path + "." + it.key(), rel);
    }
  } else if (want.is_array()) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) check_close(got[i], want[i], path + "[" + std::to_string(i) + "]", rel);
  } else {
    CHECK(got == want);
  }
}

}  // namespace

TEST_CASE("run: a study writes the results layout and the same inputs give byte-identical results") {
  TempDir tmp;
  const auto a = run_moesim({"run", small_study(), "-o", (tmp / "a").string(), "-q"});
  INFO(a.err);
  REQUIRE(a.exit_code == 0);
  CHECK(a.out.find("Predicted by the simulator (model) with profile h100-sxm") != std::string::npos);
  CHECK(a.out.find("sequential *") != std::string::npos);
  for (const char* f : {"results.csv", "results.json"}) CHECK(fs::exists(tmp / "a" / f));
  for (const char* v : {"sequential", "overlapped", "auto"})
    for (const char* f : {"result.json", "timeline.json", "scenario.yaml"}) CHECK(fs::exists(tmp / "a" / "variants" / v / f));
  const auto timeline = nlohmann::json::parse(read_text(tmp / "a" / "variants" / "overlapped" / "timeline.json"));
  CHECK(timeline["traceEvents"].size() > 100);
  const auto result = nlohmann::json::parse(read_text(tmp / "a" / "variants" / "auto" / "result.json"));
  CHECK(result["variant"]["auto_decisions"].size() == 26);

  const auto b = run_moesim({"run", small_study(), "-o", (tmp / "b").string(), "-q"});
  REQUIRE(b.exit_code == 0);
  CHECK(read_text(tmp / "a" / "results.csv") == read_text(tmp / "b" / "results.csv"));
  CHECK(without_run_info(tmp / "a" / "results.json").dump() == without_run_info(tmp / "b" / "results.json").dump());
  CHECK(read_text(tmp / "a" / "variants" / "auto" / "result.json") == read_text(tmp / "b" / "variants" / "auto" / "result.json"));
}

TEST_CASE("run: timeline.json names the variant and GPUs, counts power, links dispatch to combine, carries bytes") {
  TempDir tmp;
  const auto a = run_moesim({"run", small_study(), "-o", (tmp / "a").string(), "-q"});
  INFO(a.err);
  REQUIRE(a.exit_code == 0);
  const std::string variant = "overlapped";
  const fs::path vdir = tmp / "a" / "variants" / variant;
  const auto trace = nlohmann::json::parse(read_text(vdir / "timeline.json"));  // valid JSON or it throws
  const auto result = nlohmann::json::parse(read_text(vdir / "result.json"));
  const auto& gpus = result["variant"]["timelines"][0]["gpus"];
  const std::size_t n_gpus = gpus.size();
  REQUIRE(n_gpus >= 2);
  CHECK(trace["otherData"]["variant"] == variant);
  CHECK(trace["otherData"]["timeline"] == result["variant"]["timelines"][0]["label"]);
  CHECK(trace["otherData"]["steps_left_out"] == 0);

  std::map<int, std::string> process_names;
  std::map<int, std::vector<double>> watts;  // per GPU, in file order
  std::map<std::uint64_t, std::vector<nlohmann::json>> flows;
  std::vector<nlohmann::json> slices;
  for (const auto& e : trace["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") process_names[e["pid"].get<int>()] = e["args"]["name"];
    if (ph == "C") {
      CHECK(e["name"] == "power");
      watts[e["pid"].get<int>()].push_back(e["args"]["W"].get<double>());
    }
    if (ph == "s" || ph == "f") flows[e["id"].get<std::uint64_t>()].push_back(e);
    if (ph == "X") slices.push_back(e);
  }
  // Metadata: every GPU a process named after the variant and the GPU.
  REQUIRE(process_names.size() == n_gpus);
  for (const auto& [pid, name] : process_names) {
    CHECK(name.find(variant) != std::string::npos);
    CHECK(name.find("GPU " + std::to_string(pid)) != std::string::npos);
  }
  // Power: a counter per GPU, never above the peak the run reports for the measured steps, never
  // below zero, and changing (the GPU computes, then waits).
  REQUIRE(watts.size() == n_gpus);
  for (const auto& gpu_watts : watts) {
    const int pid = gpu_watts.first;
    const std::vector<double>& w = gpu_watts.second;
    CAPTURE(pid);
    REQUIRE(w.size() >= 2);
    const double peak = gpus[static_cast<std::size_t>(pid)]["peak_power_W"].get<double>();
    CHECK(*std::max_element(w.begin(), w.end()) <= peak * (1 + 1e-9));
    CHECK(*std::max_element(w.begin(), w.end()) > *std::min_element(w.begin(), w.end()));
    CHECK(*std::min_element(w.begin(), w.end()) >= 0.0);
  }
  // Flows: each id one start and one finish, the finish not before the start, each end at the start
  // of a slice on its GPU and lane.
  REQUIRE(!flows.empty());
  auto on_a_slice = [&](const nlohmann::json& f) {
    return std::any_of(slices.begin(), slices.end(), [&](const nlohmann::json& x) {
      return x["pid"] == f["pid"] && x["tid"] == f["tid"] && x["ts"] == f["ts"];
    });
  };
  int to_experts = 0, to_combine = 0;
  for (const auto& flow : flows) {
    const std::uint64_t id = flow.first;
    const std::vector<nlohmann::json>& ends = flow.second;
    CAPTURE(id);
    REQUIRE(ends.size() == 2);
    const auto& s = ends[0]["ph"] == "s" ? ends[0] : ends[1];
    const auto& f = ends[0]["ph"] == "s" ? ends[1] : ends[0];
    CHECK(s["ph"] == "s");
    CHECK(f["ph"] == "f");
    CHECK(f["bp"] == "e");
    CHECK(s["cat"] == f["cat"]);
    CHECK(s["pid"] == f["pid"]);
    CHECK(f["ts"].get<double>() >= s["ts"].get<double>());
    CHECK(on_a_slice(s));
    CHECK(on_a_slice(f));
    to_experts += s["name"] == "dispatch -> experts";
    to_combine += s["name"] == "experts -> combine";
  }
  CHECK(to_experts > 0);
  CHECK(to_combine > 0);
  // Args: bytes and tokens on every slice; transfers' bytes on the communication lanes only.
  int moved = 0, routed = 0;
  for (const auto& x : slices) {
    REQUIRE(x["args"].contains("bytes"));
    REQUIRE(x["args"].contains("tokens"));
    const double bytes = x["args"]["bytes"], tokens = x["args"]["tokens"];
    CHECK(bytes >= 0.0);
    CHECK(tokens >= 0.0);
    if (x["tid"] == 0) CHECK(bytes == 0.0);
    moved += x["cat"] == "dispatch" && bytes > 0.0;
    routed += x["cat"] == "experts" && tokens > 0.0;
  }
  CHECK(moved > 0);
  CHECK(routed > 0);
  // Slices of one lane nest or follow each other: Perfetto draws no partly overlapping slices.
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> lanes;
  for (const auto& x : slices) {
    const double ts = x["ts"], dur = x["dur"];
    lanes[{x["pid"].get<int>(), x["tid"].get<int>()}].emplace_back(ts, ts + dur);
  }
  for (auto& lane : lanes) {
    auto& v = lane.second;
    std::sort(v.begin(), v.end());
    for (std::size_t i = 1; i < v.size(); ++i) {
      const bool follows = v[i].first >= v[i - 1].second - 1e-6, nested = v[i].second <= v[i - 1].second + 1e-6;
      CHECK((follows || nested));
    }
  }
}

TEST_CASE("run: results match the committed golden files to 1e-9") {
  TempDir tmp;
  const auto r = run_moesim({"run", small_study(), "-o", (tmp / "out").string(), "-q"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto golden = nlohmann::json::parse(read_text(test_data_dir() / "golden" / "small-study.results.json"));
  check_close(without_run_info(tmp / "out" / "results.json"), golden, "results", 1e-9);
  // The CSV carries the same numbers at full precision; columns and variants must match exactly.
  const std::string csv = read_text(tmp / "out" / "results.csv");
  const std::string gold_csv = read_text(test_data_dir() / "golden" / "small-study.results.csv");
  CHECK(csv.substr(0, csv.find('\n')) == gold_csv.substr(0, gold_csv.find('\n')));
}

TEST_CASE("run: a non-empty output folder is refused without --force, and nothing in it changes") {
  TempDir tmp;
  fs::create_directories(tmp / "out");
  write_text(tmp / "out" / "mine.txt", "keep me");
  const auto r = run_moesim({"run", small_study(), "-o", (tmp / "out").string(), "-q"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("is not empty; pass --force") != std::string::npos);
  CHECK(read_text(tmp / "out" / "mine.txt") == "keep me");
  CHECK_FALSE(fs::exists(tmp / "out" / "results.csv"));
}

TEST_CASE("run: --check validates every variant without running, --set overrides the study") {
  const auto ok = run_moesim({"run", small_study(), "--check"});
  CHECK(ok.exit_code == 0);
  CHECK(ok.out.find("3 variants") != std::string::npos);
  const auto bad = run_moesim({"run", small_study(), "--check", "--set", "base.workload.steps=0"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--set base.workload.steps=0") != std::string::npos);
  const auto unknown = run_moesim({"run", small_study(), "--check", "--set", "base.workload.stepz=3"});
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err.find("did you mean \"steps\"") != std::string::npos);
}

TEST_CASE("run: bad input exits 2 with the file named, and leaves no results") {
  TempDir tmp;
  write_text(tmp / "bad.yaml", "schema_version: 1\nkind: study\nname: x\nbase:\n  architecture: no-such-model\n");
  const auto r = run_moesim({"run", (tmp / "bad.yaml").string(), "-o", (tmp / "out").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("no-such-model") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "out" / "results.csv"));
  const auto missing = run_moesim({"run", (tmp / "nope.yaml").string(), "-o", (tmp / "out").string()});
  CHECK(missing.exit_code == 2);
  const auto no_out = run_moesim({"run", small_study()});
  CHECK(no_out.exit_code == 2);
  CHECK(no_out.err.find("missing -o DIR") != std::string::npos);
}
