// What a user picks from a study on the command line: --only PATTERN on `study` and `run` (a
// regular expression over variant names, as --benchmark_filter), and --set on a sweep dimension that
// the study file spells with dots.
#include <doctest/doctest.h>
#include <algorithm>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::read_text;
using moesim::testing::run_moesim;
using moesim::testing::TempDir;
using moesim::testing::test_data_dir;

namespace {

std::string shards_study() { return (test_data_dir() / "studies" / "good_study_shards.yaml").string(); }

std::vector<std::string> variant_folders(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir / "variants")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("cli --only: study runs the matching variants, --resume with another pattern adds the rest") {
  TempDir tmp;
  const std::string out = (tmp / "out").string();
  auto r = run_moesim({"study", shards_study(), "-o", out, "-q", "--only", "overlapped$"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(variant_folders(out) ==
        std::vector<std::string>{"contiguous-overlapped", "greedy-overlapped", "round_robin-overlapped"});
  auto results = nlohmann::json::parse(read_text(tmp / "out" / "results.json"));
  CHECK(results["variants"].size() == 3);
  CHECK(results["baseline_in_results"] == false);  // contiguous-sequential did not run
  r = run_moesim({"study", shards_study(), "-o", out, "-q", "--resume", "--only", "^contig", "--only", "^greedy"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(variant_folders(out).size() == 5);  // round_robin-sequential is still to run
  results = nlohmann::json::parse(read_text(tmp / "out" / "results.json"));
  CHECK(results["baseline_in_results"] == true);
  // The whole study resumed: the last one runs, the results equal an unfiltered run's.
  r = run_moesim({"study", shards_study(), "-o", out, "-q", "--resume"});
  REQUIRE(r.exit_code == 0);
  CHECK(variant_folders(out).size() == 6);
  REQUIRE(run_moesim({"study", shards_study(), "-o", (tmp / "whole").string(), "-q"}).exit_code == 0);
  CHECK(read_text(tmp / "out" / "results.csv") == read_text(tmp / "whole" / "results.csv"));
}

TEST_CASE("cli --only: run and --check list the selection; bad or empty patterns are refused, naming the variants") {
  auto r = run_moesim({"run", shards_study(), "--check", "--only", "^greedy"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("6 variants, baseline contiguous-sequential; runs 2\n  greedy-sequential\n  greedy-overlapped\n") !=
        std::string::npos);
  r = run_moesim({"study", shards_study(), "--check", "--shard", "2/3", "--only", "greedy"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("shard 2/3 runs 1\n  greedy-sequential\n") != std::string::npos);
  r = run_moesim({"run", shards_study(), "--check", "--only", "(unclosed"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--only \"(unclosed\": not a regular expression") != std::string::npos);
  r = run_moesim({"study", shards_study(), "--check", "--only", "eplb"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--only eplb matches no variant of study shards; its variants: contiguous-sequential, ") !=
        std::string::npos);
  TempDir tmp;
  r = run_moesim({"run", shards_study(), "-o", (tmp / "o").string(), "-q", "--only", "^round_robin-seq"});
  REQUIRE(r.exit_code == 0);
  CHECK(variant_folders(tmp / "o") == std::vector<std::string>{"round_robin-sequential"});
}

TEST_CASE("cli --set: a sweep dimension spelled with dots in the study file is replaced, not duplicated") {
  auto r = run_moesim({"study", shards_study(), "--check", "--set", "sweep.overlap.policy=[overlapped]", "--set",
                        "baseline=contiguous-overlapped"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("3 variants") != std::string::npos);
  CHECK(r.out.find("greedy-overlapped") != std::string::npos);
  CHECK(r.out.find("-sequential") == std::string::npos);
  r = run_moesim({"run", shards_study(), "--check", "--set", "sweep.placement.policy=[greedy]", "--set",
                  "baseline=greedy-sequential"});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("2 variants") != std::string::npos);
}
