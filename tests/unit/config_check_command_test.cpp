#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "sim/cli/config_check.hpp"
#include "tests/support/test_support.hpp"

using moesim::cli::Args;
using moesim::cli::Command;
using moesim::cli::Context;

namespace {

struct Outcome {
  int code = -1;
  std::string out;
  std::string error;  // the message of a thrown InputError or UsageError
};

// Runs `moesim config check ARGS` through the command object, as run_cli would.
Outcome check(const Args& args) {
  std::vector<Command> commands;
  moesim::cli::register_config_commands(commands);
  REQUIRE(commands.size() == 1);
  REQUIRE(commands[0].words == "config check");
  std::ostringstream out;
  std::ostringstream err;
  Context ctx{out, err, false};
  Outcome o;
  try {
    o.code = commands[0].run(args, ctx);
  } catch (const moesim::common::InputError& e) {
    o.error = std::string("input: ") + e.what();
  } catch (const moesim::common::UsageError& e) {
    o.error = std::string("usage: ") + e.what();
  }
  o.out = out.str();
  return o;
}

std::string bad(const std::string& name) {
  return (moesim::testing::test_data_dir() / "configs" / (name + ".yaml")).string();
}

}  // namespace

TEST_CASE("config check: names and paths of both kinds, one summary line each") {
  const std::string cluster_path = (moesim::testing::source_dir() / "configs/clusters/h200-2x8-800g.yaml").string();
  const Outcome o = check({"deepseek-v3", cluster_path, "llama2-13b"});
  CHECK(o.error.empty());
  CHECK(o.code == 0);
  std::istringstream lines(o.out);
  std::vector<std::string> got;
  for (std::string line; std::getline(lines, line);) got.push_back(line);
  REQUIRE(got.size() == 3);
  CHECK(got[0].rfind("ok: architecture deepseek-v3 (", 0) == 0);
  CHECK(got[0].find("61 layers, 58 MoE of 256 experts, top-8 + 1 shared (4 of 8 groups)") != std::string::npos);
  CHECK(got[1].rfind("ok: cluster h200-2x8-800g (" + cluster_path + "): 2 x 8 h200", 0) == 0);
  CHECK(got[1].find("1 x 100 GB/s NICs per node") != std::string::npos);
  CHECK(got[2].find("40 layers, dense") != std::string::npos);
}

TEST_CASE("config check: --set overrides are applied and named in errors") {
  const Outcome changed = check({"--set", "nodes=4", "h100-sxm-8gpu"});
  CHECK(changed.code == 0);
  CHECK(changed.out.find(": 4 x 8 h100-sxm") != std::string::npos);
  const Outcome bogus = check({"mixtral-8x7b", "--set", "bogus=1"});
  CHECK(bogus.error.rfind("input: --set bogus=1: bogus: unknown key", 0) == 0);
}

TEST_CASE("config check: the first invalid config is an input error with its position") {
  const Outcome o = check({"mixtral-8x7b", bad("bad_cluster_nic_index"), "deepseek-v3"});
  CHECK(o.error.rfind("input: " + bad("bad_cluster_nic_index") + ":17:34: nics.gpu_nic[7]: ", 0) == 0);
  CHECK(o.out.find("ok: architecture mixtral-8x7b") != std::string::npos);  // checked before the bad one
  CHECK(o.out.find("deepseek-v3") == std::string::npos);                    // not reached
  // A path's kind comes from its `kind:` key: an architecture-shaped file saying `kind: cluster` is read as a
  // cluster, whose keys it lacks.
  CHECK(check({bad("bad_arch_wrong_kind")})
            .error.rfind("input: " + bad("bad_arch_wrong_kind") + ":4:1: num_layers: unknown key", 0) == 0);
  CHECK(check({"--kind", "architecture", bad("bad_arch_wrong_kind")})
            .error.rfind("input: " + bad("bad_arch_wrong_kind") + ":3:7: kind: expected \"architecture\"", 0) == 0);
}

TEST_CASE("config check: usage mistakes") {
  CHECK(check({"mixtral-8x7"}).error.find("unknown config \"mixtral-8x7\" (did you mean \"mixtral-8x7b\"?)") !=
        std::string::npos);
  CHECK(check({"--kind", "clusters", "h100-sxm-8gpu"}).error.rfind("usage: --kind clusters: expected one of", 0) == 0);
  CHECK(check({}).error.rfind("usage: ", 0) == 0);
  const Outcome help = check({"--help"});
  CHECK(help.code == 0);
  CHECK(help.out.rfind("usage: moesim config check [--kind architecture|cluster|profile|study|placement] "
                        "[--set key.path=value ...] CONFIG...", 0) == 0);
}

TEST_CASE("config check: profiles, studies and placements, by name or path, each fully validated") {
  const std::string study = (moesim::testing::test_data_dir() / "studies" / "good_study_shards.yaml").string();
  const std::string placement = (moesim::testing::test_data_dir() / "placements" / "good_contiguous.yaml").string();
  const Outcome o = check({"h100-sxm", study, placement});
  INFO(o.error);
  REQUIRE(o.code == 0);
  CHECK(o.out.find("ok: profile h100-sxm (") != std::string::npos);
  CHECK(o.out.find("GEMM table(s)") != std::string::npos);
  CHECK(o.out.find("ok: study shards (" + study + "): 6 variants, baseline contiguous-sequential") !=
        std::string::npos);
  CHECK(o.out.find("ok: placement " + placement + ": contiguous for ") != std::string::npos);
  // The profile a calibrating user writes is checked as the simulator reads it, overrides included.
  CHECK(check({"h100-sxm", "--set", "device.sm_count=0"}).error.rfind("input: --set device.sm_count=0: ", 0) == 0);
  // A placement is checked against its architecture; --set does not apply to it.
  const std::string dense = (moesim::testing::test_data_dir() / "placements" /
                             "bad_placement_dense_architecture.yaml").string();
  CHECK(check({dense}).error.find("expected an MoE architecture") != std::string::npos);
  CHECK(check({placement, "--set", "ep=2"}).error.rfind("usage: --set does not apply to placement files", 0) == 0);
}
