// `moesim run --dump-activities` and moesim-replay: the dump replayed by SimGrid alone reproduces
// moesim's simulated times for the ideal timeline; the option is refused where it would be ambiguous.
// The replay cases are compiled where bench/replay is built (MOESIM_BUILD_BENCH defines MOESIM_HAVE_REPLAY).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::read_text;
using moesim::testing::run_moesim;
using moesim::testing::run_program;
using moesim::testing::source_dir;
using moesim::testing::TempDir;
using moesim::testing::test_data_dir;
using moesim::testing::write_text;

namespace {

std::string decode_base() {
  return "  architecture: deepseek-v2-lite\n  cluster: h100-sxm-8gpu\n  profile: h100-sxm\n  trace: " +
         (source_dir() / "traces" / "data" / "deepseek-v2-lite-intent.mtr").string() +
         "\n  parallelism: {tp: 1, ep: 8}\n  workload: {mode: decode, batch_sequences: 16, steps: 4, warmup_steps: 1}\n"
         "  placement: {policy: contiguous}\n";
}

#ifdef MOESIM_HAVE_REPLAY

fs::path replay_binary() { return fs::path(MOESIM_BINARY_DIR) / "bench" / "replay" / "moesim-replay"; }

// One-variant study with the ideal timeline only.
std::string study_yaml(const std::string& base) {
  return "schema_version: 1\nkind: study\nname: dump\nbase:\n" + base +
         "  overlap: {policy: ideal, chunks: 2, timelines: requested}\n";
}


// moesim-replay's "key value..." lines.
std::map<std::string, std::vector<double>> parse_replay(const std::string& out) {
  std::map<std::string, std::vector<double>> m;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string key;
    l >> key;
    double v = 0;
    while (l >> v) m[key].push_back(v);
  }
  return m;
}

// Runs the study with a dump, replays it and checks the two agree on every step, to `rel`.
void check_replay_matches(const TempDir& tmp, const std::string& base, double rel = 1e-9) {
  auto close = [rel](double a, double b) { return std::fabs(a - b) <= rel * std::max(std::fabs(a), std::fabs(b)); };
  REQUIRE(fs::exists(replay_binary()));
  write_text(tmp / "study.yaml", study_yaml(base));
  const auto dump = (tmp / "acts.txt").string();
  const auto run =
      run_moesim({"run", (tmp / "study.yaml").string(), "-o", (tmp / "out").string(), "-q", "--dump-activities", dump});
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  REQUIRE(fs::exists(dump));
  const auto result = nlohmann::json::parse(read_text(tmp / "out" / "variants" / "base" / "result.json"));
  const auto& tl = result["variant"]["timelines"][0];
  const auto want_steps = tl["step_latency_s"].get<std::vector<double>>();
  const double want_measured = tl["measured_time_s"].get<double>();
  REQUIRE(!want_steps.empty());

  const auto rep = run_program(replay_binary().string(), {dump});
  INFO(rep.err);
  REQUIRE(rep.exit_code == 0);
  auto got = parse_replay(rep.out);
  REQUIRE(got.count("measured_s") == 1);
  INFO("moesim " << want_measured << " s, replay " << got["measured_s"][0] << " s");
  CHECK(close(got["measured_s"][0], want_measured));
  CHECK(got["activities"][0] == tl["activities"].get<double>());
  // The replay lists every step, warm-up included; moesim reports the measured ones, which come last.
  const auto& steps = got["step_latency_s"];
  REQUIRE(steps.size() >= want_steps.size());
  const std::size_t skip = steps.size() - want_steps.size();
  for (std::size_t i = 0; i < want_steps.size(); ++i) {
    INFO("step " << i << ": moesim " << want_steps[i] << ", replay " << steps[skip + i]);
    CHECK(close(steps[skip + i], want_steps[i]));
  }
}

#endif  // MOESIM_HAVE_REPLAY

}  // namespace

TEST_CASE("dump-activities: refused for several variants or all timelines, naming the fix") {
  TempDir tmp;
  const auto many = run_moesim({"run", (test_data_dir() / "golden" / "small-study.yaml").string(), "-o",
                                (tmp / "a").string(), "-q", "--dump-activities", (tmp / "a.txt").string()});
  CHECK(many.exit_code == 2);
  CHECK(many.err.find("3 variants") != std::string::npos);
  CHECK(many.err.find("--set") != std::string::npos);
  CHECK(!fs::exists(tmp / "a.txt"));

  write_text(tmp / "all.yaml", "schema_version: 1\nkind: study\nname: all\nbase:\n" + decode_base() +
                                   "  overlap: {policy: ideal, timelines: all}\n");
  const auto all = run_moesim({"run", (tmp / "all.yaml").string(), "-o", (tmp / "b").string(), "-q",
                               "--dump-activities", (tmp / "b.txt").string()});
  CHECK(all.exit_code == 2);
  CHECK(all.err.find("base.overlap.timelines=requested") != std::string::npos);
  CHECK(!fs::exists(tmp / "b.txt"));
}

#ifdef MOESIM_HAVE_REPLAY

TEST_CASE("dump-activities: a decode dump replayed by SimGrid alone gives moesim's step times") {
  TempDir tmp;
  check_replay_matches(tmp, decode_base() + "  network: {fidelity: flow}\n");
  // The dump is not replaced without --force.
  const auto again = run_moesim({"run", (tmp / "study.yaml").string(), "-o", (tmp / "out2").string(), "-q",
                                 "--dump-activities", (tmp / "acts.txt").string()});
  CHECK(again.exit_code == 2);
  CHECK(again.err.find("--force") != std::string::npos);
  CHECK(!fs::exists(tmp / "out2" / "results.json"));
}

TEST_CASE("dump-activities: a dump of a run in the fluid network replays by SimGrid's flows to its precision") {
  // The fluid network and SimGrid's solver agree to about 1e-7 (docs/simulator.md, "Network fidelity").
  TempDir tmp;
  check_replay_matches(tmp, decode_base(), 1e-6);
}

TEST_CASE("dump-activities: a synthetic two-node dump (NIC and switch routes) replays to the same times") {
  TempDir tmp;
  check_replay_matches(
      tmp,
      "  architecture: mixtral-8x7b\n  cluster: h200-2x8-800g\n  trace: none\n"
      "  workload: {mode: synthetic, steps: 3, synthetic: {compute: 50us, a2a_bytes: 4MiB, layers: 4}}\n"
      "  placement: {policy: contiguous}\n");
}

TEST_CASE("moesim-replay: a truncated or foreign file is refused with its line") {
  REQUIRE(fs::exists(replay_binary()));
  TempDir tmp;
  write_text(tmp / "foreign.txt", "hello\n");
  const auto foreign = run_program(replay_binary().string(), {(tmp / "foreign.txt").string()});
  CHECK(foreign.exit_code == 2);
  CHECK(foreign.err.find("foreign.txt:1:") != std::string::npos);

  write_text(tmp / "cut.txt", "moesim-activities 3\nhost gpu0 1e12 1\nstep 0 1 0 1 0\nJ 0 0\n");
  const auto cut = run_program(replay_binary().string(), {(tmp / "cut.txt").string()});
  CHECK(cut.exit_code == 2);
  CHECK(cut.err.find("truncated") != std::string::npos);

  write_text(tmp / "bad.txt", "moesim-activities 3\nhost gpu0 1e12 1\nstep 0 1 0 1 0\nE 0 3 1e9 0\nend 1 1\n");
  const auto bad = run_program(replay_binary().string(), {(tmp / "bad.txt").string()});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("bad.txt:4: expected a host index below 1, got 3") != std::string::npos);

  // A version-2 dump (a transfer's latency 0 meaning its route's, routes weighted by latency) names the fix.
  write_text(tmp / "old.txt", "moesim-activities 2\nhost gpu0 1e12 1\n");
  const auto old = run_program(replay_binary().string(), {(tmp / "old.txt").string()});
  CHECK(old.exit_code == 2);
  CHECK(old.err.find("old.txt:1: expected format version 3, got 2") != std::string::npos);

  write_text(tmp / "neg.txt",
             "moesim-activities 3\nhost gpu0 1e12 1\nhost gpu1 1e12 1\nlink l 1e9 1e-6 shared\nroute 0 1 1 0\n"
             "route 1 0 1 0\nstep 0 1 0 1 0\nC 0 0 1 1000 -1e-6 0\nend 1 1\n");
  const auto neg = run_program(replay_binary().string(), {(tmp / "neg.txt").string()});
  CHECK(neg.exit_code == 2);
  CHECK(neg.err.find("neg.txt:8: expected a latency >= 0") != std::string::npos);
}

#endif  // MOESIM_HAVE_REPLAY
