// tools/gpu-validate.sh, the prepared GPU run, on the fake device (`--fake`: calibrate's
// `--fake-device`): every step runs, OUT gets the eight files the device machine returns, the
// profile it writes loads and carries power by kernel class, validation has its three kinds of case
// (alone, traffic, two micro-batches), and bad usage exits 2 with a message.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/profile.hpp"
#include "tests/support/test_support.hpp"

using moesim::testing::CliResult;
using moesim::testing::TempDir;

namespace {

namespace fs = std::filesystem;

// The build folder holding the moesim-calibrate the suite was built with.
fs::path build_dir() {
  const char* env = std::getenv("MOESIM_CALIBRATE_BIN");
  return fs::path(env ? env : MOESIM_CALIBRATE_BIN).parent_path().parent_path();
}

CliResult gpu_validate(const std::vector<std::string>& args) {
  std::vector<std::string> all{(moesim::testing::source_dir() / "tools/gpu-validate.sh").string()};
  all.insert(all.end(), args.begin(), args.end());
  return moesim::testing::run_program("/bin/sh", all);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("cli gpu-validate: --fake runs every step and writes profile, logs and the validation table") {
  TempDir tmp;
  const fs::path out = tmp.path() / "out";
  const CliResult r = gpu_validate({"--fake", "--build", build_dir().string(), "--out", out.string()});
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(out)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  CHECK(files == std::vector<std::string>{"build.log", "calibrate.log", "profile.raw.json", "profile.yaml",
                                          "smoke.log", "summary.txt", "validation.json", "validation.txt"});
  const std::string summary = moesim::testing::read_text(out / "summary.txt");
  CHECK(contains(summary, "device: fake device (--fake)"));
  CHECK(contains(summary, "calibrate  ok"));
  CHECK(contains(summary, "validate   ok"));
  CHECK(contains(summary, "smoke      skipped"));
  CHECK(contains(summary, ": PASS"));
  CHECK(contains(summary, "status 0"));
  CHECK(r.out == summary);

  const moesim::models::Profile p = moesim::models::load_profile((out / "profile.yaml").string());
  CHECK(contains(p.device.name, "fake device"));
  CHECK(p.power.provenance.kind == moesim::models::SourceKind::kMeasured);
  CHECK(!p.power.memory_bound.empty());
  CHECK(p.contention.provenance.kind == moesim::models::SourceKind::kMeasured);
  CHECK(!p.contention.points.empty());
  CHECK(contains(summary, "# validation:   alone               6 cases"));
  CHECK(contains(summary, "# validation:   traffic             6 cases"));
  CHECK(contains(summary, "# validation:   two micro-batches   6 cases"));
  const auto v = nlohmann::json::parse(moesim::testing::read_text(out / "validation.json"));
  // Layers 0 and 13, three windows, alone, under traffic and as two micro-batches.
  CHECK(v.at("cases").size() == 18);
  CHECK(v.at("passed") == true);
  int two = 0;
  for (const auto& c : v.at("cases")) {
    if (c.at("kind") != "two micro-batches") continue;
    ++two;
    REQUIRE(c.at("phases").size() == 2);
    CHECK(c.at("phases")[0].at("phase") == "A's experts + B's dispatch");
    CHECK(c.at("phases")[1].at("phase") == "B's experts + A's combine");
    const auto tokens = c.at("micro_batch_tokens").get<std::vector<long>>();
    CHECK(tokens[0] - tokens[1] <= 1);
    CHECK(c.at("measured_s").get<double>() < c.at("measured_sequential_s").get<double>());
    CHECK(c.at("measured_overlap_gain").get<double>() > 0.0);
  }
  CHECK(two == 6);
  const std::string table = moesim::testing::read_text(out / "validation.txt");
  CHECK(contains(table, "two micro-batches"));
  CHECK(contains(table, "sequential (GEMMs, then traffic)"));
}

TEST_CASE("cli gpu-validate: bad usage exits 2 and says what is wrong") {
  TempDir tmp;
  const CliResult no_out = moesim::testing::run_program(
      "/usr/bin/env", {"-u", "OUT", "/bin/sh", (moesim::testing::source_dir() / "tools/gpu-validate.sh").string(),
                       "--fake", "--build", build_dir().string()});
  CHECK(no_out.exit_code == 2);
  CHECK(contains(no_out.err, "no output folder: set OUT or give --out DIR"));
  const CliResult gpus = gpu_validate({"--fake", "--gpus", "x", "--out", tmp.path().string()});
  CHECK(gpus.exit_code == 2);
  CHECK(contains(gpus.err, "--gpus: expected a positive integer, got x"));
  const CliResult unknown = gpu_validate({"--frobnicate"});
  CHECK(unknown.exit_code == 2);
  CHECK(contains(unknown.err, "unknown option --frobnicate"));
}

TEST_CASE("cli gpu-validate: a failing calibration is reported in the summary and the exit status") {
  TempDir tmp;
  // The real device path on a machine without a GPU: calibrate fails, validation cannot run.
  if (moesim::testing::run_program(build_dir().string() + "/calibrate/moesim-calibrate", {"--list-devices"}).exit_code == 0)
    return;  // a GPU is here: this path does not apply
  const fs::path out = tmp.path() / "out";
  const CliResult r = gpu_validate({"--build", build_dir().string(), "--out", out.string()});
  CHECK(r.exit_code == 1);
  const std::string summary = moesim::testing::read_text(out / "summary.txt");
  CHECK(contains(summary, "calibrate  failed(1)"));
  CHECK(contains(summary, "no profile was written: validation not run"));
  CHECK(contains(summary, "status 1"));
  CHECK(!fs::exists(out / "profile.yaml"));
}
