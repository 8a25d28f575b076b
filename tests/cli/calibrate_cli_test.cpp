// The real moesim-calibrate executable on a machine without a usable GPU (here: no driver, or a
// build without CUDA): --help, --dry-run, --list-devices, a measurement run and validate; exit
// codes, messages, and no file left behind.
#include <filesystem>

#include "tests/support/test_support.hpp"

using moesim::testing::CliResult;
using moesim::testing::TempDir;

namespace {

CliResult calibrate(const std::vector<std::string>& args) {
  const char* env = std::getenv("MOESIM_CALIBRATE_BIN");
  return moesim::testing::run_program(env ? env : MOESIM_CALIBRATE_BIN, args);
}
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// These tests describe the no-GPU path; on a GPU machine they would measure, so they step aside.
bool has_gpu() { return calibrate({"--list-devices"}).exit_code == 0; }

}  // namespace

TEST_CASE("cli calibrate: --help and --version describe the tool and its build") {
  const CliResult h = calibrate({"--help"});
  CHECK(h.exit_code == 0);
  for (const char* opt : {"--plan", "--gpus", "--dtypes", "--minbytes", "--dry-run", "--list-devices", "--force",
                          "--allow-set-power-limit", "--allow-set-clocks", "validate"})
    CHECK_MESSAGE(contains(h.out, opt), opt);
  CHECK(contains(h.out, "Build: "));
  const CliResult v = calibrate({"--version"});
  CHECK(v.exit_code == 0);
  CHECK(contains(v.out, "moesim-calibrate 0."));
  CHECK(calibrate({"validate", "--help"}).exit_code == 0);
}

TEST_CASE("cli calibrate: --dry-run prints the plan and its duration without a GPU") {
  const CliResult q = calibrate({"--dry-run"});
  CHECK(q.exit_code == 0);
  CHECK(contains(q.out, "--plan quick"));
  CHECK(contains(q.out, "estimated total"));
  CHECK(contains(q.out, "nothing was measured"));
  const CliResult f = calibrate({"--dry-run", "--plan", "full", "--gpus", "4", "-b", "8K", "-e", "8M", "-f", "4"});
  CHECK(f.exit_code == 0);
  CHECK(contains(f.out, "6 ops x 6 sizes"));
  const CliResult bad = calibrate({"--dry-run", "--plan", "quik"});
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, "quick"));
  CHECK(calibrate({"--dry-run", "--dtypes", "bf16,int4"}).exit_code == 2);
  CHECK(calibrate({"--dry-run", "-f", "1"}).exit_code == 2);
}

TEST_CASE("cli calibrate: without a GPU, listing and measuring fail cleanly and write nothing") {
  if (has_gpu()) {
    MESSAGE("a GPU is present: the no-GPU path is not exercised here");
    return;
  }
  const CliResult l = calibrate({"--list-devices"});
  CHECK(l.exit_code == 1);
  CHECK(contains(l.err, "no GPU"));
  TempDir dir;
  const CliResult m = calibrate({"--plan", "quick", "-o", (dir / "p.yaml").string()});
  CHECK(m.exit_code == 1);
  CHECK(contains(m.err, "no GPU"));
  CHECK((contains(m.err, "no file was written") || contains(m.err, "without CUDA")));
  CHECK(std::filesystem::is_empty(dir.path()));
  const CliResult v = calibrate({"validate", "--profile", "h200", "--trace",
                                 (moesim::testing::source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string(),
                                 "--json", (dir / "v.json").string()});
  CHECK(v.exit_code == 1);
  CHECK(contains(v.err, "no GPU"));
  CHECK(std::filesystem::is_empty(dir.path()));
}

TEST_CASE("cli calibrate: an existing profile is refused before anything else, and bad input exits 2") {
  TempDir dir;
  moesim::testing::write_text(dir / "p.yaml", "mine\n");
  const CliResult r = calibrate({"-o", (dir / "p.yaml").string()});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--force"));
  CHECK(moesim::testing::read_text(dir / "p.yaml") == "mine\n");
  CHECK(calibrate({}).exit_code == 2);  // no -o
  CHECK(calibrate({"--no-such-flag"}).exit_code == 2);
  const CliResult v = calibrate({"validate", "--profile", "h200"});
  CHECK(v.exit_code == 2);
  CHECK(contains(v.err, "--trace"));
  const CliResult p = calibrate({"validate", "--profile", "no-such-profile", "--trace", (dir / "t.mtr").string()});
  CHECK(p.exit_code == 2);
}
