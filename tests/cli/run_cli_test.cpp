// `moesim run` as a user runs it: results layout, determinism, goldens, refusal to overwrite,
// --check, --set, and bad studies.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <string>

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
