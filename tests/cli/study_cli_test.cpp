// `moesim study` as a user runs it: the same results as moesim run, the placement cache, the output
// folder rules, --resume (after a deleted variant and after a killed run), --shard, merge and its
// refusals, and the GNU parallel one-liner of docs/study-format.md.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/hash.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::read_text;
using moesim::testing::run_moesim;
using moesim::testing::run_program;
using moesim::testing::TempDir;
using moesim::testing::test_data_dir;
using moesim::testing::write_text;

namespace {

std::string shards_study() { return (test_data_dir() / "studies" / "good_study_shards.yaml").string(); }
std::string cache_study() { return (test_data_dir() / "studies" / "good_study_cache.yaml").string(); }

const std::vector<std::string> kShardVariants = {"contiguous-sequential",  "contiguous-overlapped",
                                                 "round_robin-sequential", "round_robin-overlapped",
                                                 "greedy-sequential",      "greedy-overlapped"};

std::string moesim_bin() {
  const char* bin = std::getenv("MOESIM_BIN");
  return bin ? bin : std::string(MOESIM_BINARY_DIR) + "/sim/moesim";
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (auto p = text.find('\n'); p != std::string::npos; start = p + 1, p = text.find('\n', start))
    out.push_back(text.substr(start, p - start));
  return out;
}

// results.json without what differs between runs (dates, hosts, wall times, where the shards ran).
nlohmann::json stable_results(const fs::path& file) {
  auto j = nlohmann::json::parse(read_text(file));
  j.erase("run_info");
  return j;
}

std::vector<std::string> folder_names(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Each variant folder in `dir` is whole: its three files, and a result.json that parses.
void check_only_whole_variants(const fs::path& dir) {
  for (const auto& name : folder_names(dir / "variants")) {
    INFO(name);
    const fs::path v = dir / "variants" / name;
    REQUIRE(fs::exists(v / "result.json"));
    CHECK(fs::exists(v / "timeline.json"));
    CHECK(fs::exists(v / "scenario.yaml"));
    CHECK(nlohmann::json::parse(read_text(v / "result.json"))["variant"]["name"] == name);
  }
}

}  // namespace

TEST_CASE("study: writes moesim run's results byte for byte with each placement solved once and recorded") {
  TempDir tmp;
  const auto run = run_moesim({"run", shards_study(), "-o", (tmp / "run").string(), "-q"});
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const auto study = run_moesim({"study", shards_study(), "-o", (tmp / "study").string()});
  INFO(study.err);
  REQUIRE(study.exit_code == 0);
  CHECK(read_text(tmp / "study" / "results.csv") == read_text(tmp / "run" / "results.csv"));
  // One writer: the same results.json outside run_info (dates, hosts, wall times).
  CHECK(stable_results(tmp / "study" / "results.json") == stable_results(tmp / "run" / "results.json"));
  for (const auto& v : folder_names(tmp / "study" / "variants"))
    CHECK(read_text(tmp / "study" / "variants" / v / "result.json") == read_text(tmp / "run" / "variants" / v / "result.json"));
  CHECK(study.out.find("contiguous-sequential *") != std::string::npos);
  CHECK(study.out.find("Results: " + (tmp / "study" / "results.csv").string()) != std::string::npos);
  // Not a terminal: a plain start and finish line per variant, with times.
  CHECK(count(study.err, ": started\n") == 6);
  CHECK(count(study.err, ": finished in ") == 6);
  CHECK(study.err.find("[6/6] greedy-overlapped: finished in ") != std::string::npos);
  // Three policies, each solved once (contiguous and round_robin too: every policy goes to the cache).
  CHECK(folder_names(tmp / "study" / "placements").size() == 3);
  CHECK(count(study.err, "placement solved into") == 3);
  CHECK(count(study.err, "placement reused from") == 3);
  const auto rows = nlohmann::json::parse(read_text(tmp / "study" / "results.json"))["variants"];
  REQUIRE(rows.size() == 6);
  CHECK(rows[0]["p50_change_vs_baseline"] == 0.0);
  CHECK(rows[1]["p99_change_vs_baseline"].is_number());
  const auto state = nlohmann::json::parse(read_text(tmp / "study" / "study.json"));
  CHECK(state["shard"].is_null());
  CHECK(state["shard_variants"].size() == 6);

  const auto quiet = run_moesim({"study", shards_study(), "-o", (tmp / "quiet").string(), "--quiet"});
  REQUIRE(quiet.exit_code == 0);
  CHECK(quiet.err.find("started") == std::string::npos);
  CHECK(read_text(tmp / "quiet" / "results.csv") == read_text(tmp / "study" / "results.csv"));
  // Deterministic solving: the same input gives the same placement file in another folder.
  for (const auto& f : folder_names(tmp / "study" / "placements"))
    CHECK(read_text(tmp / "quiet" / "placements" / f) == read_text(tmp / "study" / "placements" / f));
}

TEST_CASE("study: two overlap policies over one solving policy solve the placement once and share its file") {
  TempDir tmp;
  const auto r = run_moesim({"study", cache_study(), "-o", (tmp / "out").string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto files = folder_names(tmp / "out" / "placements");
  REQUIRE(files.size() == 1);
  CHECK(files[0].starts_with("greedy-"));
  CHECK(count(r.err, "placement solved into") == 1);
  CHECK(count(r.err, "placement reused from") == 1);
  const std::string sha = moesim::common::sha256_file((tmp / "out" / "placements" / files[0]).string());
  for (const char* v : {"sequential", "overlapped"}) {
    INFO(v);
    const auto j = nlohmann::json::parse(read_text(tmp / "out" / "variants" / v / "result.json"))["variant"];
    CHECK(j["inputs"]["placement_file"] == "placements/" + files[0]);
    CHECK(j["inputs"]["hashes"]["placement_sha256"] == sha);
    CHECK(j["placement_policy"] == "greedy");
  }
  // The cached file is a placement file like any other: moesim place evaluate reads it.
  const auto eval = run_moesim({"place", "evaluate", "--placement", (tmp / "out" / "placements" / files[0]).string(),
                                "--trace", (test_data_dir() / "studies" / "tiny.trace").string()});
  INFO(eval.err);
  CHECK(eval.exit_code == 0);
}

TEST_CASE("study: the report draws one step per GPU of each timeline and links every variant's trace") {
  TempDir tmp;
  const fs::path out = tmp / "out";
  const auto r = run_moesim({"study", cache_study(), "-o", out.string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::string page = read_text(out / "report.html");
  CHECK(page.find("<svg id=\"chart-timelines\" data-chart=\"timelines\"") != std::string::npos);
  CHECK(page.find("ui.perfetto.dev") != std::string::npos);
  CHECK(page.find("Open trace file") != std::string::npos);
  for (const char* v : {"sequential", "overlapped"}) {
    INFO(v);
    // The link is relative to the page and names a file that is there.
    const std::string href = std::string("variants/") + v + "/timeline.json";
    CHECK(page.find("data-variant=\"" + std::string(v) + "\" href=\"" + href + "\"") != std::string::npos);
    CHECK(fs::exists(out / href));
    // Each timeline's recorded step: per GPU, sorted disjoint intervals inside the step, which is no
    // longer than the first measured step it is.
    const auto j = nlohmann::json::parse(read_text(out / "variants" / v / "result.json"))["variant"];
    std::set<std::string> labels;
    for (const auto& t : j["timelines"]) {
      const std::string label = t["label"];
      INFO(label);
      labels.insert(label);
      const auto& a = t["step_activity"];
      REQUIRE(a.is_object());
      const double span = a["span_s"], first = t["step_latency_s"][0];
      CHECK(span > 0.0);
      CHECK(span <= first * (1 + 1e-9));
      CHECK(a["gpus"].size() == t["gpus"].size());
      int busy = 0;
      for (const auto& g : a["gpus"])
        for (const char* lane : {"compute", "comm"}) {
          double last = -1.0;
          for (const auto& iv : g[lane]) {
            const double b = iv[0], e = iv[1];
            CHECK(b > last);
            CHECK(e >= b);
            CHECK(e <= span * (1 + 1e-9));
            last = e;
            ++busy;
          }
        }
      CHECK(busy > 0);
    }
    CHECK(labels.count("sequential") == 1);
    CHECK(labels.count("overlapped") == 1);
    CHECK(labels.count("ideal") == 1);
  }
  // A page written elsewhere links back into the results folder.
  fs::create_directories(tmp / "elsewhere");
  const auto rep = run_moesim({"report", out.string(), "-o", (tmp / "elsewhere" / "r.html").string()});
  INFO(rep.err);
  REQUIRE(rep.exit_code == 0);
  const std::string moved = read_text(tmp / "elsewhere" / "r.html");
  const std::string open = "data-variant=\"overlapped\" href=\"";
  const auto at = moved.find(open);
  REQUIRE(at != std::string::npos);
  const std::string href = moved.substr(at + open.size(), moved.find('"', at + open.size()) - at - open.size());
  CHECK(href.starts_with("../"));
  CHECK(fs::exists(tmp / "elsewhere" / href));
}

TEST_CASE("study: a non-empty folder is refused without --resume or --force and is left as it was") {
  TempDir tmp;
  fs::create_directories(tmp / "out");
  write_text(tmp / "out" / "mine.txt", "keep me");
  const auto r = run_moesim({"study", cache_study(), "-o", (tmp / "out").string(), "-q"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("is not empty; pass --resume") != std::string::npos);
  CHECK(r.err.find("--force") != std::string::npos);
  CHECK(folder_names(tmp / "out") == std::vector<std::string>{"mine.txt"});
  // A folder without study.json holds nothing to resume.
  const auto resume = run_moesim({"study", cache_study(), "-o", (tmp / "out").string(), "-q", "--resume"});
  CHECK(resume.exit_code == 2);
  CHECK(resume.err.find("has no study.json") != std::string::npos);
  CHECK(read_text(tmp / "out" / "mine.txt") == "keep me");
  const auto both = run_moesim({"study", cache_study(), "-o", (tmp / "out").string(), "--resume", "--force"});
  CHECK(both.exit_code == 2);
  const auto forced = run_moesim({"study", cache_study(), "-o", (tmp / "out").string(), "-q", "--force"});
  INFO(forced.err);
  CHECK(forced.exit_code == 0);
  CHECK(fs::exists(tmp / "out" / "results.csv"));
}

TEST_CASE("study: --resume runs only the variants without a whole folder and refuses another study's folder") {
  TempDir tmp;
  const fs::path out = tmp / "out";
  const auto first = run_moesim({"study", shards_study(), "-o", out.string(), "-q"});
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  const std::string csv = read_text(out / "results.csv");
  fs::remove_all(out / "variants" / "round_robin-overlapped");
  // A variant folder whose result.json was never written (a run killed while writing it).
  fs::remove(out / "variants" / "greedy-sequential" / "result.json");
  std::map<std::string, fs::file_time_type> mtimes;
  for (const auto& v : folder_names(out / "variants"))
    if (fs::exists(out / "variants" / v / "result.json"))
      mtimes[v] = fs::last_write_time(out / "variants" / v / "result.json");
  REQUIRE(mtimes.size() == 4);

  const auto resumed = run_moesim({"study", shards_study(), "-o", out.string(), "--resume"});
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(count(resumed.err, ": skipped, complete in ") == 4);
  CHECK(count(resumed.err, ": started\n") == 2);
  CHECK(resumed.err.find("round_robin-overlapped: started") != std::string::npos);
  CHECK(resumed.err.find("greedy-sequential: started") != std::string::npos);
  for (const auto& entry : mtimes) {
    INFO(entry.first);
    CHECK(fs::last_write_time(out / "variants" / entry.first / "result.json") == entry.second);
  }
  CHECK(read_text(out / "results.csv") == csv);
  // A second resume has nothing left to run.
  const auto again = run_moesim({"study", shards_study(), "-o", out.string(), "--resume"});
  REQUIRE(again.exit_code == 0);
  CHECK(count(again.err, ": skipped, complete in ") == 6);
  CHECK(again.err.find("started") == std::string::npos);

  // Another study, the same study with other --set options, or another shard: refused.
  const auto other = run_moesim({"study", cache_study(), "-o", out.string(), "--resume"});
  CHECK(other.exit_code == 2);
  CHECK(other.err.find("holds another study: shards from") != std::string::npos);
  const auto overridden =
      run_moesim({"study", shards_study(), "-o", out.string(), "--resume", "--set", "base.workload.steps=2"});
  CHECK(overridden.exit_code == 2);
  CHECK(overridden.err.find("overrides [base.workload.steps=2]") != std::string::npos);
  const auto shard = run_moesim({"study", shards_study(), "-o", out.string(), "--resume", "--shard", "1/2"});
  CHECK(shard.exit_code == 2);
  CHECK(shard.err.find("holds all variants (not sharded)") != std::string::npos);
  CHECK(read_text(out / "results.csv") == csv);
}

TEST_CASE(
    "study: a run killed between variants leaves whole variant folders and a valid table that --resume completes") {
  TempDir tmp;
  const fs::path out = tmp / "out";
  const fs::path err_file = tmp / "stderr.txt";
  const std::string bin = moesim_bin();
  const std::string study = shards_study();
  const std::string out_s = out.string();
  std::vector<const char*> argv = {bin.c_str(), "study", study.c_str(), "-o", out_s.c_str(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, bin.c_str(), &actions, nullptr, const_cast<char* const*>(argv.data()), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  // Kill it once the second variant has finished (or when it exits on its own first).
  int status = 0;
  bool exited = false;
  while (!exited) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    if (fs::exists(err_file) && read_text(err_file).find("[2/6] contiguous-overlapped: finished") != std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  INFO(read_text(err_file));
  check_only_whole_variants(out);
  const auto done = folder_names(out / "variants");
  CHECK(done.size() >= 2);
  // The table is valid and lists finished variants only: a header, then a row for each variant whose
  // folder is whole (the kill may fall between a variant's folder and the table that adds it).
  const auto csv = lines_of(read_text(out / "results.csv"));
  REQUIRE(csv.size() >= 3);
  CHECK(csv.size() <= done.size() + 1);
  CHECK(csv[0].starts_with("variant,baseline,"));
  for (std::size_t i = 1; i < csv.size(); ++i) {
    const std::string name = csv[i].substr(0, csv[i].find(','));
    CHECK(std::find(done.begin(), done.end(), name) != done.end());
  }
  CHECK(nlohmann::json::parse(read_text(out / "results.json"))["variants"].size() == csv.size() - 1);

  const auto resumed = run_moesim({"study", study, "-o", out_s, "--resume"});
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(count(resumed.err, ": skipped, complete in ") == done.size());
  CHECK(count(resumed.err, ": started\n") == 6 - done.size());
  const auto clean = run_moesim({"study", study, "-o", (tmp / "clean").string(), "-q"});
  REQUIRE(clean.exit_code == 0);
  CHECK(read_text(out / "results.csv") == read_text(tmp / "clean" / "results.csv"));
  CHECK_FALSE(fs::exists(out / ".partial"));
}

TEST_CASE("study: --shard must be i/N with 1 <= i <= N") {
  for (const char* bad : {"0/2", "3/2", "a/b", "2", "1/0", "-1/2", "1/2x", "/2"}) {
    INFO(bad);
    const auto r = run_moesim({"study", shards_study(), "--check", "--shard", bad});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("expected i/N with 1 <= i <= N") != std::string::npos);
  }
  const auto ok = run_moesim({"study", shards_study(), "--check", "--shard", "2/4"});
  CHECK(ok.exit_code == 0);
  CHECK(ok.out.find("shard 2/4 runs 2") != std::string::npos);
  CHECK(ok.out.find("  contiguous-overlapped\n") != std::string::npos);
  CHECK(ok.out.find("  greedy-overlapped\n") != std::string::npos);
  CHECK(ok.out.find("  contiguous-sequential\n") == std::string::npos);
}

TEST_CASE("study merge: 2 and 3 shards merge to the unsharded run's results.csv byte for byte") {
  TempDir tmp;
  const auto whole = run_moesim({"study", shards_study(), "-o", (tmp / "whole").string(), "-q"});
  INFO(whole.err);
  REQUIRE(whole.exit_code == 0);
  for (int n : {2, 3}) {
    CAPTURE(n);
    std::vector<std::string> merge = {"study", "merge"};
    for (int i = 1; i <= n; ++i) {
      const std::string dir = (tmp / ("s" + std::to_string(n) + "-" + std::to_string(i))).string();
      const auto r =
          run_moesim({"study", shards_study(), "-o", dir, "--shard", std::to_string(i) + "/" + std::to_string(n)});
      INFO(r.err);
      REQUIRE(r.exit_code == 0);
      CHECK(count(r.err, ": started\n") == (n == 2 ? 3u : 2u));
      const auto state = nlohmann::json::parse(read_text(fs::path(dir) / "study.json"));
      CHECK(state["shard"]["index"] == i);
      CHECK(state["shard"]["count"] == n);
      merge.push_back(dir);
    }
    // Shard 2 of 2 holds no baseline: its change columns are empty.
    if (n == 2) {
      const auto rows = nlohmann::json::parse(read_text(tmp / "s2-2" / "results.json"))["variants"];
      REQUIRE(rows.size() == 3);
      CHECK(rows[0]["p50_change_vs_baseline"].is_null());
      const auto csv = lines_of(read_text(tmp / "s2-2" / "results.csv"));
      REQUIRE(csv.size() == 4);
      CHECK(csv[1].ends_with(",,"));
    }
    const fs::path merged = tmp / ("merged" + std::to_string(n));
    merge.insert(merge.end(), {"-o", merged.string()});
    const auto m = run_moesim(merge);
    INFO(m.err);
    REQUIRE(m.exit_code == 0);
    CHECK(read_text(merged / "results.csv") == read_text(tmp / "whole" / "results.csv"));
    CHECK(stable_results(merged / "results.json") == stable_results(tmp / "whole" / "results.json"));
    CHECK(folder_names(merged / "variants") == folder_names(tmp / "whole" / "variants"));
    CHECK(folder_names(merged / "placements") == folder_names(tmp / "whole" / "placements"));
    for (const auto& v : kShardVariants)
      CHECK(read_text(merged / "variants" / v / "result.json") ==
            read_text(tmp / "whole" / "variants" / v / "result.json"));
    CHECK(m.out.find("contiguous-sequential *") != std::string::npos);
    // The merged folder is an unsharded study folder: resuming it runs nothing.
    const auto resume = run_moesim({"study", shards_study(), "-o", merged.string(), "--resume"});
    REQUIRE(resume.exit_code == 0);
    CHECK(resume.err.find("started") == std::string::npos);
  }
  // Overlapping folders agree, so merging a shard with the whole run is fine.
  const auto overlap =
      run_moesim({"study", "merge", (tmp / "whole").string(), (tmp / "s2-1").string(), "-o", (tmp / "m").string()});
  INFO(overlap.err);
  CHECK(overlap.exit_code == 0);
  // ... and a refusal to overwrite without --force.
  const auto again = run_moesim(
      {"study", "merge", (tmp / "s2-1").string(), (tmp / "s2-2").string(), "-o", (tmp / "merged2").string()});
  CHECK(again.exit_code == 2);
  CHECK(again.err.find("--force") != std::string::npos);
}

TEST_CASE("study merge: missing variants are named with the command that makes them and other studies are refused") {
  TempDir tmp;
  const std::string s1 = (tmp / "s1").string();
  REQUIRE(run_moesim({"study", shards_study(), "-o", s1, "--shard", "1/3", "-q"}).exit_code == 0);
  const auto missing = run_moesim({"study", "merge", s1, "-o", (tmp / "m").string()});
  CHECK(missing.exit_code == 2);
  INFO(missing.err);
  CHECK(missing.err.find("hold 2 of the 6 variants") != std::string::npos);
  CHECK(missing.err.find(
            "missing: contiguous-overlapped, round_robin-sequential, greedy-sequential, greedy-overlapped") !=
        std::string::npos);
  CHECK(missing.err.find("--shard 2/3") != std::string::npos);
  CHECK(missing.err.find("--shard 3/3") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "m"));

  // A shard folder whose variant folder went missing is resumed by its own command.
  const std::string s2 = (tmp / "s2").string(), s3 = (tmp / "s3").string();
  REQUIRE(run_moesim({"study", shards_study(), "-o", s2, "--shard", "2/3", "-q"}).exit_code == 0);
  REQUIRE(run_moesim({"study", shards_study(), "-o", s3, "--shard", "3/3", "-q"}).exit_code == 0);
  fs::remove_all(fs::path(s3) / "variants" / "greedy-overlapped");
  const auto gone = run_moesim({"study", "merge", s1, s2, s3, "-o", (tmp / "m").string()});
  CHECK(gone.exit_code == 2);
  CHECK(gone.err.find("missing: greedy-overlapped") != std::string::npos);
  CHECK(gone.err.find("-o " + s3 + " --shard 3/3 --resume") != std::string::npos);

  // Shards of the same file under other --set options are another study.
  const std::string other = (tmp / "other").string();
  REQUIRE(run_moesim({"study", shards_study(), "-o", other, "--shard", "2/3", "-q", "--set", "base.workload.steps=2"})
              .exit_code == 0);
  const auto mixed = run_moesim({"study", "merge", s1, other, s3, "-o", (tmp / "m").string()});
  CHECK(mixed.exit_code == 2);
  CHECK(mixed.err.find("merge only shards of one study") != std::string::npos);
  const auto not_study = run_moesim({"study", "merge", s1, tmp.path().string(), "-o", (tmp / "m").string()});
  CHECK(not_study.exit_code == 2);
  CHECK(not_study.err.find("is not a folder written by moesim study") != std::string::npos);
}

TEST_CASE("study: the GNU parallel one-liner of docs/study-format.md runs the shards and merges them") {
  const auto which = run_program("/bin/sh", {"-c", "command -v parallel"});
  if (which.exit_code != 0) FAIL("GNU parallel not found: install GNU parallel (sh tools/setup.sh --test)");
  TempDir tmp;
  const std::string cmd = "cd '" + tmp.path().string() + "' && parallel --will-cite -j2 '" + moesim_bin() +
                          "' study '" + shards_study() +
                          "' -o out/shard{} --placements out/placements --shard {}/3 --quiet ::: 1 2 3 && '" +
                          moesim_bin() + "' study merge out/shard* -o out/all";
  const auto r = run_program("/bin/sh", {"-c", cmd});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(folder_names(tmp / "out") == std::vector<std::string>{"all", "placements", "shard1", "shard2", "shard3"});
  CHECK(folder_names(tmp / "out" / "all" / "variants").size() == 6);
  // Quiet shards print no partial table; the merge prints the whole one.
  CHECK(r.out.find("contiguous-sequential") == r.out.rfind("contiguous-sequential"));
  // Each shard holds copies of the shared placements its variants ran, and no lock is left behind.
  std::size_t copies = 0;
  for (const auto& e : fs::directory_iterator(tmp / "out" / "placements")) {
    CHECK(e.path().extension() == ".yaml");
    for (const char* shard : {"shard1", "shard2", "shard3"}) {
      const fs::path copy = tmp / "out" / shard / "placements" / e.path().filename();
      if (!fs::exists(copy)) continue;
      CHECK(read_text(copy) == read_text(e.path()));
      ++copies;
    }
  }
  CHECK(copies >= 3);
  const auto whole = run_moesim({"study", shards_study(), "-o", (tmp / "whole").string(), "-q"});
  REQUIRE(whole.exit_code == 0);
  CHECK(read_text(tmp / "out" / "all" / "results.csv") == read_text(tmp / "whole" / "results.csv"));
}

TEST_CASE("study: shards sharing --placements solve each placement once, the other shard waits and reads it") {
  TempDir tmp;
  // Shards 2 and 3 of 3 both run a greedy variant (same key): started together, one solves it.
  const std::string run = "'" + moesim_bin() + "' study '" + shards_study() + "' --placements '" +
                          (tmp / "shared").string() + "' -o '" + tmp.path().string() + "/s";
  const std::string cmd = "(" + run + "2' --shard 2/3 2> '" + tmp.path().string() + "/e2' >/dev/null & " + run +
                          "3' --shard 3/3 2> '" + tmp.path().string() + "/e3' >/dev/null; s3=$?; wait $! && exit $s3)";
  const auto r = run_program("/bin/sh", {"-c", cmd});
  const std::string err = read_text(tmp / "e2") + read_text(tmp / "e3");
  INFO(err);
  REQUIRE(r.exit_code == 0);
  CHECK(count(err, "placement solved into " + (tmp / "shared").string() + "/greedy-") == 1);
  CHECK(count(err, "placement reused from " + (tmp / "shared").string() + "/greedy-") == 1);
  for (const auto& e : fs::directory_iterator(tmp / "shared")) CHECK(e.path().extension() == ".yaml");
  for (const char* shard : {"s2", "s3"}) {
    const auto result = nlohmann::json::parse(read_text(tmp / shard / "results.json"));
    for (const auto& row : result["variants"]) {
      if (!row["inputs"].contains("placement_file")) continue;
      const std::string file = row["inputs"]["placement_file"];
      CHECK(file.starts_with("placements/"));
      CHECK(read_text(tmp / shard / file) == read_text(tmp / "shared" / fs::path(file).filename()));
    }
  }
}

TEST_CASE("study: tools/slurm-study.sh submits a shard array and a dependent merge (run by a stand-in sbatch)") {
  TempDir tmp;
  fs::create_directories(tmp / "bin");
  // Runs what real sbatch would queue, at once and in order: each array task with SLURM's variables
  // and the exported MOESIM_SLURM_STEP, then the merge job; records the options it was given.
  write_text(tmp / "bin" / "sbatch", R"(#!/bin/sh
array="" step="" dep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --array=*) array=${1#--array=} ;;
    --export=*) step=${1#*MOESIM_SLURM_STEP=}; step=${step%%,*} ;;
    --dependency=*) dep=${1#--dependency=} ;;
    --kill-on-invalid-dep=*) dep="$dep kill=${1#--kill-on-invalid-dep=}" ;;
    --*) ;;
    *) break ;;
  esac
  shift
done
script=$1; shift
echo "array=$array step=$step dep=$dep" >> "$FAKE_SLURM_LOG"
if [ -n "$array" ]; then
  n=${array#1-}; i=1
  while [ "$i" -le "$n" ]; do
    MOESIM_SLURM_STEP=$step SLURM_ARRAY_TASK_ID=$i SLURM_ARRAY_TASK_COUNT=$n sh "$script" "$@" >> "$FAKE_SLURM_LOG" 2>&1 || exit 1
    i=$((i + 1))
  done
  echo "4242;cluster"
else
  MOESIM_SLURM_STEP=$step sh "$script" "$@" >> "$FAKE_SLURM_LOG" 2>&1 || exit 1
  echo 4243
fi
)");
  fs::permissions(tmp / "bin" / "sbatch", fs::perms::owner_all);
  const std::string script = (moesim::testing::source_dir() / "tools" / "slurm-study.sh").string();
  const std::string cmd = "cd '" + tmp.path().string() + "' && PATH='" + (tmp / "bin").string() + "':$PATH MOESIM='" +
                          moesim_bin() + "' FAKE_SLURM_LOG='" + (tmp / "sbatch.log").string() + "' sh '" + script +
                          "' '" + shards_study() + "' out 3 --set base.workload.steps=2";
  const auto r = run_program("/bin/sh", {"-c", cmd});
  INFO(r.err);
  INFO(read_text(tmp / "sbatch.log"));
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("job array 4242 (1-3") != std::string::npos);
  const std::string log = read_text(tmp / "sbatch.log");
  CHECK(log.find("array=1-3 step=shard dep=\n") != std::string::npos);
  CHECK(log.find("array= step=merge dep=afterok:4242 kill=yes\n") != std::string::npos);
  CHECK(fs::is_directory(tmp / "out" / "placements"));
  for (int i = 1; i <= 3; ++i) {
    const auto state = nlohmann::json::parse(read_text(tmp / "out" / ("shard-" + std::to_string(i)) / "study.json"));
    CHECK(state["shard"]["index"] == i);
    CHECK(state["overrides"] == nlohmann::json::array({"base.workload.steps=2"}));
  }
  const auto whole =
      run_moesim({"study", shards_study(), "-o", (tmp / "whole").string(), "-q", "--set", "base.workload.steps=2"});
  REQUIRE(whole.exit_code == 0);
  CHECK(read_text(tmp / "out" / "all" / "results.csv") == read_text(tmp / "whole" / "results.csv"));
  // One task resubmitted alone (sbatch --array=2: SLURM_ARRAY_TASK_COUNT=1) is still shard 2 of 3.
  const auto again = run_program(
      "/bin/sh", {"-c", "cd '" + tmp.path().string() + "' && MOESIM_SLURM_STEP=shard SLURM_ARRAY_TASK_ID=2 " +
                            "SLURM_ARRAY_TASK_COUNT=1 MOESIM='" + moesim_bin() + "' sh '" + script + "' '" +
                            shards_study() + "' again 3 --set base.workload.steps=2"});
  INFO(again.err);
  REQUIRE(again.exit_code == 0);
  const auto state = nlohmann::json::parse(read_text(tmp / "again" / "shard-2" / "study.json"));
  CHECK(state["shard"] == nlohmann::json{{"index", 2}, {"count", 3}});
  // A bad N is refused before anything is submitted.
  const auto bad = run_program("/bin/sh", {"-c", "PATH='" + (tmp / "bin").string() + "':$PATH sh '" + script + "' '" +
                                                     shards_study() + "' out2 0"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("N must be a positive whole number") != std::string::npos);
}

TEST_CASE("study: on a terminal the progress is one redrawn line and --quiet silences it there too") {
  // script(1) (util-linux, essential on Debian) gives moesim a terminal; its transcript is stdout.
  TempDir tmp;
  const std::string run =
      "'" + moesim_bin() + "' study '" + cache_study() + "' -o '" + (tmp / "out").string() + "' > /dev/null";
  const auto r = run_program("/usr/bin/script", {"-qec", run, "/dev/null"});
  INFO(r.out);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("\r[....................] 0/2 variants  sequential  ") != std::string::npos);
  CHECK(r.out.find("\r[##########..........] 1/2 variants  sequential  ") != std::string::npos);
  CHECK(r.out.find(" left\033[K") != std::string::npos);
  CHECK(r.out.find("\r[####################] 2/2 variants  ") != std::string::npos);
  CHECK(r.out.find(": started") == std::string::npos);
  const std::string quiet =
      "'" + moesim_bin() + "' study '" + cache_study() + "' -o '" + (tmp / "q").string() + "' -q > /dev/null";
  const auto q = run_program("/usr/bin/script", {"-qec", quiet, "/dev/null"});
  REQUIRE(q.exit_code == 0);
  CHECK(q.out.find("variants") == std::string::npos);
}

TEST_CASE("study: --cfg passes SimGrid settings to every variant and is part of the study's identity") {
  TempDir tmp;
  const auto plain = run_moesim({"study", cache_study(), "-o", (tmp / "plain").string(), "-q"});
  REQUIRE_MESSAGE(plain.exit_code == 0, plain.err);
  // Ten times the link latency: every transfer of the all-to-all pays it, so the steps get slower.
  const auto slow = run_moesim(
      {"study", cache_study(), "-o", (tmp / "slow").string(), "-q", "--cfg", "network/latency-factor:10"});
  REQUIRE_MESSAGE(slow.exit_code == 0, slow.err);
  const auto p50 = [&](const std::string& dir) {
    const auto j = nlohmann::json::parse(read_text(tmp / dir / "results.json"));
    return j["variants"][0]["step_latency_s"]["p50"].get<double>();
  };
  CHECK(p50("slow") > p50("plain"));
  CHECK(read_text(tmp / "slow" / "variants" / "sequential" / "scenario.yaml").find("\"network/latency-factor:10\"") !=
        std::string::npos);
  // Resuming the folder without the setting would mix two different simulations: refused.
  const auto resume = run_moesim({"study", cache_study(), "-o", (tmp / "slow").string(), "-q", "--resume"});
  CHECK(resume.exit_code == 2);

  const auto bad = run_moesim({"study", cache_study(), "-o", (tmp / "bad").string(), "--cfg", "latency-factor"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--cfg latency-factor: expected a SimGrid setting \"name:value\"") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "bad" / "results.csv"));
}
