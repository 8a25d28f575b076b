// `moesim trace stats` and `moesim trace generate` as a user runs them: the table and the JSON on the
// shipped DeepSeek-V2-Lite trace, generation (synthetic and fitted) and its determinism, the
// no-overwrite rule, and bad options (exit 2, the option named).
#include <nlohmann/json.hpp>

#include "tests/support/test_support.hpp"
#include "traces/memory_trace.hpp"
#include "traces/trace.hpp"

using moesim::testing::CliResult;
using moesim::testing::run_moesim;
using moesim::testing::TempDir;

namespace {

std::string shipped_trace() { return (moesim::testing::source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string(); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void check_usage_error(const std::vector<std::string>& args, const std::string& expected) {
  const CliResult r = run_moesim(args);
  CAPTURE(r.err);
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, expected));
}

}  // namespace

TEST_CASE("cli trace stats: the table on the shipped trace") {
  const CliResult r = run_moesim({"trace", "stats", shipped_trace()});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.out, "(every number computed from the trace)"));
  CHECK(contains(r.out, "8222 tokens in 127 sequences, 26 MoE layers, 64 experts, top-6"));
  CHECK(contains(r.out, "max/mean load: 2.93 (layer 2) to 4.68 (layer 22)"));
  CHECK(contains(r.out, "strongest pair per layer pair: lift 15.17 to 43.37, median 22.26"));
  CHECK(contains(r.out, "20 strongest pairs:"));
  CHECK(contains(r.out, "1. layer 8 expert 23 -> layer 9 expert 29: lift 43.37 (130 tokens together)"));
}

TEST_CASE("cli trace stats: --json, --top and --min-together") {
  const CliResult r = run_moesim({"trace", "stats", "--json", "--top", "5", "--min-together", "100", shipped_trace()});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["schema_version"] == 1);
  CHECK(doc["provenance"] == "computed from the trace");
  CHECK(doc["trace"]["sha256"].get<std::string>().size() == 64);
  CHECK(doc["trace"]["token_count"] == 8222);
  CHECK(doc["options"]["min_together"] == 100);
  CHECK(doc["summary"]["top_pairs"].size() == 5);
  for (const auto& p : doc["summary"]["top_pairs"]) CHECK(p["together"].get<int>() >= 100);
  CHECK(doc["layers"][0]["max_mean"].get<double>() == doctest::Approx(4.1761).epsilon(1e-4));
  CHECK(doc["context"]["version"].is_string());
}

TEST_CASE("cli trace stats: bad input") {
  check_usage_error({"trace", "stats"}, "usage: moesim trace stats");
  check_usage_error({"trace", "stats", "--min-together", "0", shipped_trace()}, "--min-together");
  check_usage_error({"trace", "stats", "--top", "-3", shipped_trace()}, "--top");
  check_usage_error({"trace", "stats", "--bogus", shipped_trace()}, "bogus");
  const CliResult missing = run_moesim({"trace", "stats", "/nonexistent/x.mtr"});
  CHECK(missing.exit_code == 2);
  CHECK(contains(missing.err, "/nonexistent/x.mtr"));
}

TEST_CASE("cli trace generate: synthetic, deterministic, never overwriting without --force") {
  TempDir dir;
  const std::string a = (dir / "a.mtr").string();
  const std::string b = (dir / "b.mtr").string();
  const std::vector<std::string> args = {"trace", "generate", "--architecture", "deepseek-v2-lite", "--tokens", "3k",
                                         "--seed", "9", "--zipf", "0.5", "--affinity", "0.7", "--drift", "0.2",
                                         "--seq-len-range", "16:64", "--weights", "-o"};
  auto with_output = [&](const std::string& out) {
    auto v = args;
    v.push_back(out);
    return v;
  };
  const CliResult r = run_moesim(with_output(a));
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.out, "3,000 tokens"));
  REQUIRE(run_moesim(with_output(b)).exit_code == 0);
  CHECK(moesim::testing::read_text(a) == moesim::testing::read_text(b));
  const auto trace = moesim::traces::load_trace(a);
  CHECK(trace.meta.token_count == 3000);
  CHECK(trace.meta.has_weights);
  CHECK(trace.meta.shape.layers.size() == 26);
  CHECK(contains(trace.meta.source, "seed 9"));
  // The output exists now: refused without --force, replaced with it.
  const CliResult again = run_moesim(with_output(a));
  CHECK(again.exit_code == 2);
  CHECK(contains(again.err, "--force"));
  auto forced = with_output(a);
  forced.push_back("--force");
  CHECK(run_moesim(forced).exit_code == 0);
  // Its statistics can be read back.
  const CliResult stats = run_moesim({"trace", "stats", a});
  CHECK(stats.exit_code == 0);
  CHECK(contains(stats.out, "3000 tokens"));
}

TEST_CASE("cli trace generate: --fit, --save-model and --model give the same trace") {
  TempDir dir;
  const std::string fitted = (dir / "fitted.mtr").string();
  const std::string model = (dir / "model.json").string();
  const std::string again = (dir / "again.mtr").string();
  // A model of at most 2,000 source tokens keeps the JSON round trip quick.
  const CliResult r = run_moesim({"trace", "generate", "--fit", shipped_trace(), "--fit-max-tokens", "2k", "--tokens",
                                  "20000", "--seed", "4", "--save-model", model, "-o", fitted});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.out, "routing model of "));
  CHECK(contains(r.out, "20,000 tokens"));
  const CliResult m = run_moesim({"trace", "generate", "--model", model, "--tokens", "20000", "--seed", "4", "-o", again});
  CAPTURE(m.err);
  REQUIRE(m.exit_code == 0);
  CHECK(moesim::testing::read_text(fitted) == moesim::testing::read_text(again));
  const auto doc = nlohmann::json::parse(moesim::testing::read_text(model));
  CHECK(doc["source"]["sha256"].get<std::string>().size() == 64);
  CHECK(doc["source"]["token_count"] == 8222);
  std::uint64_t kept = 0;
  for (const auto& len : doc["sequence_lengths"]) kept += len.get<std::uint64_t>();
  CHECK(kept <= 2000);
  CHECK(kept > 0);
  const auto trace = moesim::traces::load_trace(fitted);
  CHECK(trace.meta.shape.architecture == "deepseek-v2-lite");
  CHECK(trace.meta.has_weights);
}

TEST_CASE("cli trace generate: bad options exit 2 and name the option") {
  TempDir dir;
  const std::string out = (dir / "x.mtr").string();
  auto synth = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = {"trace", "generate", "--architecture", "deepseek-v2-lite", "--tokens", "100", "-o", out};
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  check_usage_error(synth({"--zipf", "-1"}), "--zipf");
  check_usage_error(synth({"--zipf", "lots"}), "zipf");
  check_usage_error(synth({"--affinity", "1.5"}), "--affinity: expected a strength in [0, 1], got 1.5");
  check_usage_error(synth({"--drift", "2"}), "--drift");
  check_usage_error(synth({"--hot-experts", "2", "--hot-share", "0.5"}), "--hot-share: 0.5 cannot go to 2 experts");
  check_usage_error(synth({"--hot-share", "0.5"}), "--hot-share: given without --hot-experts");
  check_usage_error(synth({"--hot-experts", "64", "--hot-share", "0.5"}), "--hot-experts");
  check_usage_error(synth({"--seq-len", "0"}), "--seq-len");
  check_usage_error(synth({"--seq-len", "8", "--seq-len-range", "4:9"}), "--seq-len and --seq-len-range");
  check_usage_error(synth({"--seq-len-range", "9:4"}), "--seq-len-range");
  check_usage_error(synth({"--seq-len-range", "9"}), "expected MIN:MAX");
  check_usage_error(synth({"--fit-jump", "0.1"}), "--fit-jump applies to --fit only");
  check_usage_error(synth({"--seed", "-4"}), "--seed");
  check_usage_error({"trace", "generate", "--architecture", "deepseek-v2-lite", "--tokens", "0", "-o", out}, "--tokens");
  check_usage_error({"trace", "generate", "--architecture", "deepseek-v2-lite", "--tokens", "-5", "-o", out}, "--tokens");
  check_usage_error({"trace", "generate", "--architecture", "deepseek-v2-lite", "--tokens", "ten", "-o", out},
                    "--tokens: expected a whole number");
  check_usage_error({"trace", "generate", "--architecture", "deepseek-v2-lite", "-o", out}, "tokens");
  check_usage_error({"trace", "generate", "--tokens", "100", "-o", out}, "give exactly one of --architecture");
  check_usage_error({"trace", "generate", "--architecture", "deepseek-v2-lite", "--fit", shipped_trace(), "--tokens",
                     "100", "-o", out},
                    "give exactly one of");
  check_usage_error({"trace", "generate", "--fit", shipped_trace(), "--zipf", "1", "--tokens", "100", "-o", out},
                    "--zipf applies to synthetic traces");
  check_usage_error({"trace", "generate", "--fit", shipped_trace(), "--weights", "--tokens", "100", "-o", out},
                    "--weights applies to synthetic traces");
  check_usage_error({"trace", "generate", "--fit", shipped_trace(), "--fit-mutation", "1.5", "--tokens", "100", "-o",
                     out},
                    "--fit-mutation");
  check_usage_error({"trace", "generate", "--fit", shipped_trace(), "--tokens", "100", "--save-model", out, "-o", out},
                    "name the same file");
  const CliResult unknown = run_moesim({"trace", "generate", "--architecture", "deepseek-v9", "--tokens", "100", "-o", out});
  CHECK(unknown.exit_code == 2);
  CHECK(contains(unknown.err, "deepseek-v9"));
  const CliResult dense = run_moesim({"trace", "generate", "--architecture", "llama2-13b", "--tokens", "100", "-o", out});
  CHECK(dense.exit_code == 2);
  CHECK(contains(dense.err, "no MoE layers"));
  moesim::testing::write_text(dir / "bad.json", "{\"schema_version\": 1}");
  check_usage_error({"trace", "generate", "--model", (dir / "bad.json").string(), "--tokens", "100", "-o", out},
                    "bad.json: kind: missing");
  CHECK_FALSE(std::filesystem::exists(out));
}
