// `moesim trace import --format counts` and `moesim trace stats` on a load-only trace, as a user runs
// them: the shipped DeepSeek-V2-Lite counts (tests/data/traces/counts_dsv2_lite.*, from
// make_load_samples.py) import from .npy, .json and .csv, the .npy to exactly the shipped load-only
// trace; bad input exits 2 naming the file and entry and leaves no output; stats say load-only.
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::CliResult;
using moesim::testing::read_text;
using moesim::testing::run_moesim;
using moesim::testing::TempDir;
using moesim::testing::write_text;

namespace {

fs::path data() { return moesim::testing::test_data_dir() / "traces"; }
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

CliResult import_counts(const fs::path& input, const fs::path& output, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"trace",          "import",           "--format", "counts",
                                   "--architecture", "deepseek-v2-lite", input.string(), "-o",
                                   output.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_moesim(args);
}

}  // namespace

TEST_CASE("trace counts cli: the npy, json and csv samples import, the npy to the shipped load-only trace") {
  TempDir out;
  for (const char* name : {"counts_dsv2_lite.npy", "counts_dsv2_lite.json", "counts_dsv2_lite.csv"}) {
    CAPTURE(name);
    const fs::path mlt = out / (std::string(name) + ".mlt");
    const CliResult r = import_counts(data() / name, mlt);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(contains(r.out, "imported 4 iterations, 263 tokens (63 to 73 per iteration) from " +
                              (data() / name).string()));
    CHECK(contains(r.out, "deepseek-v2-lite, 26 MoE layers, top-6 of 64 experts"));
    CHECK(contains(r.out, "load-only"));
    CHECK(fs::exists(mlt));
  }
  CHECK(read_text(out / "counts_dsv2_lite.npy.mlt") == read_text(data() / "load_dsv2_lite.mlt"));

  // No overwrite without --force; the old file survives.
  write_text(out / "old.mlt", "precious");
  CliResult r = import_counts(data() / "counts_dsv2_lite.npy", out / "old.mlt");
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--force"));
  CHECK(read_text(out / "old.mlt") == "precious");
  r = import_counts(data() / "counts_dsv2_lite.npy", out / "old.mlt", {"--force"});
  CHECK(r.exit_code == 0);
  CHECK(read_text(out / "old.mlt") == read_text(data() / "load_dsv2_lite.mlt"));
}

TEST_CASE("trace counts cli: bad counts exit 2, name the file and entry, and write nothing") {
  TempDir out;
  std::string csv = read_text(data() / "counts_dsv2_lite.csv");
  // Line 3 is iteration 0, layer 1: make its first count negative.
  std::size_t line3 = csv.find('\n', csv.find('\n') + 1) + 1;
  std::size_t first = csv.find(',', csv.find(',', line3) + 1) + 1;
  csv.insert(first, "-");
  write_text(out / "neg.csv", csv);
  CliResult r = import_counts(out / "neg.csv", out / "o.mlt");
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(
      contains(r.err, (out / "neg.csv").string() + ":3: field 3 (iteration 0, layer 1, MoE layer 2, expert 0)"),
      r.err);
  CHECK(contains(r.err, "is negative"));
  CHECK_FALSE(fs::exists(out / "o.mlt"));

  // A model whose shape differs: the layer axis is named.
  r = run_moesim({"trace", "import", "--format", "counts", "--architecture", "mixtral-8x7b",
                  (data() / "counts_dsv2_lite.npy").string(), "-o", (out / "o.mlt").string()});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "26 layers x 64 experts, but mixtral-8x7b has 32 MoE layers"));
  CHECK_FALSE(fs::exists(out / "o.mlt"));

  r = import_counts(data() / "counts_dsv2_lite.npy", out / "o.mlt", {"--encoding", "text"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--encoding does not apply to --format counts"));
  CHECK_FALSE(fs::exists(out / "o.mlt"));

  // Commands that need per-token routes say what the file is.
  r = run_moesim({"trace", "convert", (data() / "load_dsv2_lite.mlt").string(), "-o", (out / "x.mtr").string()});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "a load-only trace (per-step expert token counts, no per-token routes)"));
}

TEST_CASE("trace counts cli: trace stats on a load-only trace, as a table and as JSON") {
  const std::string mlt = (data() / "load_dsv2_lite.mlt").string();
  CliResult r = run_moesim({"trace", "stats", mlt});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(contains(r.out, "(every number computed from the trace)"));
  CHECK(contains(r.out, "deepseek-v2-lite: load-only trace, 4 iterations, 263 tokens (per iteration 63 to 73, mean "
                        "65.8), 26 MoE layers, 64 experts, top-6"));
  CHECK(contains(r.out, "no cross-layer affinity"));
  CHECK(contains(r.out, "max/mean load: "));
  CHECK_FALSE(contains(r.out, "strongest pair"));

  r = run_moesim({"trace", "stats", "--json", mlt});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["schema_version"] == 1);
  CHECK(doc["load_only"] == true);
  CHECK(doc["trace"]["iterations"] == 4);
  CHECK(doc["trace"]["token_count"] == 263);
  CHECK(doc["trace"]["sha256"].get<std::string>().size() == 64);
  CHECK(doc["tokens_per_iteration"]["max"] == 73.0);
  REQUIRE(doc["layers"].size() == 26);
  for (const auto& layer : doc["layers"]) {
    std::uint64_t sum = 0;
    for (const auto& v : layer["loads"]) sum += v.get<std::uint64_t>();
    CHECK(sum == 263u * 6u);
    CHECK(layer["max_mean"].get<double>() >= 1.0);
    CHECK(layer["step_max_mean_max"].get<double>() >= layer["step_max_mean_mean"].get<double>());
  }
  CHECK_FALSE(doc.contains("layer_pairs"));
}
