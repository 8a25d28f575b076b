// Bad input is refused by one validation path that `--check` and the run share, before the run
// writes anything: the profile is read, the trace must hold tokens, sizes have limits, SimGrid
// settings are checked against SimGrid, and the environment and options are checked too. A run
// refused for bad input leaves its output folder untouched, so the corrected rerun just works.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::CliResult;
using moesim::testing::run_moesim;
using moesim::testing::TempDir;
using moesim::testing::test_data_dir;
using moesim::testing::write_text;

namespace {

std::string good_study() { return (test_data_dir() / "studies" / "good_single.yaml").string(); }
std::string studies(const std::string& name) { return (test_data_dir() / "studies" / name).string(); }
std::string profiles(const std::string& name) { return (test_data_dir() / "profiles" / name).string(); }
// Malformed YAML of any kind: the config loader's bad files serve as profiles too.
std::string bad_yaml(const std::string& name) { return (test_data_dir() / "configs" / name).string(); }

bool empty_or_absent(const fs::path& dir) {
  std::error_code ec;
  return !fs::exists(dir, ec) || fs::is_empty(dir, ec);
}

// Sets an environment variable for the scope (the moesim child inherits it).
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  const char* name_;
};

}  // namespace

TEST_CASE("validation cli: study --check reads the profile: a bad one exits 2 naming it, and the run writes nothing") {
  TempDir tmp;
  // 20,000 nested lists: refused by depth, never by the stack.
  const fs::path deep = tmp / "deep_profile.yaml";
  write_text(deep, "schema_version: 1\nkind: profile\ndevice: " + std::string(20000, '[') + "1" +
                       std::string(20000, ']') + "\n");
  const std::vector<std::string> bad = {
      profiles("bad_profile_zero_bandwidth.yaml"), profiles("bad_profile_nan_bandwidth.yaml"),
      profiles("bad_profile_zero_flops.yaml"),     bad_yaml("bad_yaml_binary.yaml"),
      bad_yaml("bad_yaml_empty.yaml"),             bad_yaml("bad_yaml_syntax.yaml"),
      bad_yaml("bad_yaml_anchor.yaml"),            bad_yaml("bad_yaml_too_deep.yaml"),
      deep.string()};
  const fs::path out = tmp / "out";
  for (const std::string& profile : bad) {
    CAPTURE(profile);
    const CliResult check = run_moesim({"study", good_study(), "--check", "--set", "base.profile=" + profile});
    CHECK(check.exit_code == 2);
    CHECK_MESSAGE(check.err.find(profile) != std::string::npos, check.err);
    CHECK(check.err.size() < 2000);
    const CliResult run =
        run_moesim({"study", good_study(), "-o", out.string(), "-q", "--set", "base.profile=" + profile});
    CHECK(run.exit_code == 2);
    CHECK_MESSAGE(run.err.find(profile) != std::string::npos, run.err);
    CHECK(empty_or_absent(out));  // no study.json: the corrected rerun needs no --resume or --force
  }
  const CliResult good_check =
      run_moesim({"study", good_study(), "--check", "--set", "base.profile=" + profiles("tiny.yaml")});
  CHECK_MESSAGE(good_check.exit_code == 0, good_check.err);
  const CliResult rerun =
      run_moesim({"study", good_study(), "-o", out.string(), "-q", "--set", "base.profile=" + profiles("tiny.yaml")});
  CHECK_MESSAGE(rerun.exit_code == 0, rerun.err);
  CHECK(fs::exists(out / "study.json"));
}

TEST_CASE("validation cli: a trace with no tokens is refused by --check and the run, naming the file") {
  TempDir tmp;
  for (const char* mode : {"--check", "-o"}) {
    CAPTURE(mode);
    std::vector<std::string> args = {"study", studies("bad_study_empty_trace.yaml"), mode};
    if (std::string(mode) == "-o") args.push_back((tmp / "out").string());
    const CliResult r = run_moesim(args);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.err.find(studies("no_tokens.txt") + ", which holds none") != std::string::npos, r.err);
  }
  CHECK(empty_or_absent(tmp / "out"));
}

TEST_CASE("validation cli: sizes beyond the limits are refused by --check, with the limit in the message") {
  const CliResult cluster = run_moesim({"study", studies("bad_study_cluster_too_large.yaml"), "--check"});
  CHECK(cluster.exit_code == 2);
  CHECK_MESSAGE(cluster.err.find("expected a cluster of at most 4096 GPUs") != std::string::npos, cluster.err);
  CHECK(cluster.err.find("with 1000000") != std::string::npos);
  const CliResult ep = run_moesim({"study", studies("bad_study_ep_above_experts.yaml"), "--check"});
  CHECK(ep.exit_code == 2);
  CHECK_MESSAGE(ep.err.find("expected ep at most 8 (the 8 experts of tiny-moe") != std::string::npos, ep.err);
  CHECK(ep.err.find("got 128") != std::string::npos);
}

TEST_CASE("validation cli: --cfg is checked against SimGrid by --check and before the run writes anything") {
  TempDir tmp;
  struct Case {
    const char* setting;
    const char* reason;
  };
  for (const Case& c : {Case{"nope/nope:1", "Bad config key: nope/nope"},
                        Case{"network/model:NOPE", "Model 'NOPE' is invalid! Valid models are: LV08"},
                        Case{"network/TCP-gamma:abc", "invalid double"}}) {
    CAPTURE(c.setting);
    const CliResult check = run_moesim({"study", good_study(), "--check", "--cfg", c.setting});
    CHECK(check.exit_code == 2);
    CHECK_MESSAGE(check.err.find("--cfg \"" + std::string(c.setting) + "\": SimGrid refuses it: " + c.reason) !=
                      std::string::npos,
                  check.err);
    CHECK(check.err.size() < 2000);  // SimGrid's list of every setting is not echoed
    const CliResult run = run_moesim({"study", good_study(), "-o", (tmp / "out").string(), "-q", "--cfg", c.setting});
    CHECK(run.exit_code == 2);
    CHECK(empty_or_absent(tmp / "out"));
  }
  // The same settings in the study's simgrid list.
  for (const char* file : {"bad_study_simgrid_unknown.yaml", "bad_study_simgrid_model.yaml"}) {
    const CliResult r = run_moesim({"study", studies(file), "--check"});
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.err.find("expected a SimGrid setting that SimGrid accepts") != std::string::npos, r.err);
  }
  const CliResult good = run_moesim({"study", good_study(), "--check", "--cfg", "network/model:LV08"});
  CHECK_MESSAGE(good.exit_code == 0, good.err);
}

TEST_CASE("validation cli: MOESIM_JOBS must be a whole number of processes") {
  for (const char* value : {"abc", "0", "-2", "3x", "99999999999"}) {
    CAPTURE(value);
    ScopedEnv env("MOESIM_JOBS", value);
    const CliResult r = run_moesim({"study", good_study(), "--check"});
    CHECK(r.exit_code == 2);
    const std::string expected = "MOESIM_JOBS=\"" + std::string(value) + "\": expected a whole number";
    CHECK_MESSAGE(r.err.find(expected) != std::string::npos, r.err);
  }
  ScopedEnv env("MOESIM_JOBS", "2");
  CHECK(run_moesim({"study", good_study(), "--check"}).exit_code == 0);
}

TEST_CASE("validation cli: a huge --set is refused without echoing it whole") {
  const std::string key(100000, 'a');
  for (const std::string& set : {"base." + key + "=1", "base.workload.steps=" + key, key}) {
    const CliResult r = run_moesim({"study", good_study(), "--check", "--set", set});
    CHECK(r.exit_code == 2);
    const std::string expected = "expected at most 4096 characters, got " + std::to_string(set.size());
    CHECK_MESSAGE(r.err.find(expected) != std::string::npos, r.err.substr(0, 300));
    CHECK(r.err.size() < 1000);
  }
}

TEST_CASE("validation cli: study and run --check -o refuse an output that the run would refuse") {
  TempDir tmp;
  const fs::path file = tmp / "results.txt";
  write_text(file, "not a folder\n");
  const fs::path full = tmp / "full";
  fs::create_directories(full);
  write_text(full / "x", "x\n");
  for (const char* command : {"study", "run"}) {
    CAPTURE(command);
    const CliResult r = run_moesim({command, good_study(), "--check", "-o", file.string()});
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.err.find(file.string() + " exists and is not a folder") != std::string::npos, r.err);
    const CliResult f = run_moesim({command, good_study(), "--check", "-o", full.string()});
    CHECK(f.exit_code == 2);
    CHECK_MESSAGE(f.err.find(full.string() + " is not empty") != std::string::npos, f.err);
    CHECK(run_moesim({command, good_study(), "--check", "-o", full.string(), "--force"}).exit_code == 0);
    CHECK(run_moesim({command, good_study(), "--check", "-o", (tmp / "new").string()}).exit_code == 0);
  }
  // --resume needs a folder that holds a study run.
  CHECK(run_moesim({"study", good_study(), "--check", "-o", full.string(), "--resume"}).exit_code == 2);
  write_text(full / "study.json", "{}\n");
  CHECK(run_moesim({"study", good_study(), "--check", "-o", full.string(), "--resume"}).exit_code == 0);
}
