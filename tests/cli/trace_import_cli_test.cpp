// `moesim trace import | convert | split` as a user runs them: every bad input under
// tests/data/traces/bad_* exits with 2, names the file and line (or byte offset), and leaves no
// output; good inputs give the documented reports and byte-identical outputs.
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::CliResult;
using moesim::testing::read_text;
using moesim::testing::run_moesim;
using moesim::testing::TempDir;

namespace {

fs::path data() { return moesim::testing::test_data_dir() / "traces"; }
std::string tiny() { return (data() / "tiny-dsv2.yaml").string(); }

struct BadCase {
  const char* input;              // under tests/data/traces
  const char* format;             // import format, or "" for trace convert
  std::vector<std::string> extra;  // more options
  const char* expect;             // after the input path: ":line: ..." or ": byte offset ..."
};

const std::vector<BadCase>& bad_cases() {
  static const std::vector<BadCase> cases = {
      {"bad_esft_missing_layer", "esft", {}, ": missing the layer file for MoE layer 3"},
      {"bad_esft_extra_layer", "esft", {}, "/expert_weights_0.txt: layer 0 is not an MoE layer"},
      {"bad_esft_line_counts", "esft", {}, "/expert_weights_3.txt: ends after 1 lines"},
      {"bad_esft_ragged", "esft", {}, "/expert_weights_2.txt:2: 2 tokens (12 ids), but "},
      {"bad_esft_id_range", "esft", {}, "/expert_weights_1.txt:1: field 8 (token 1, expert 2 of 6): expert id 64 is out"},
      {"bad_esft_negative", "esft", {}, "/expert_weights_4.txt:2: field 1 (token 0, expert 1 of 6): expert id -1 is out"},
      {"bad_esft_not_integer", "esft", {}, "/expert_weights_2.txt:1: field 4 (token 0, expert 4 of 6): expected an expert id"},
      {"bad_esft_huge", "esft", {}, "/expert_weights_2.txt:2: field 5 (token 0, expert 5 of 6): expected an expert id"},
      {"bad_esft_duplicate", "esft", {}, "/expert_weights_3.txt:1: token 1 (fields 7..12): expert 0 appears twice"},
      {"bad_esft_bad_weight", "esft", {}, "/expert_weights_1.txt:2: gate weight 3 (token 0): expected a finite number"},
      {"bad_esft_weight_count", "esft", {}, "/expert_weights_2.txt:1: 18 expert ids but 17 gate weights"},
      {"bad_esft_no_separator", "esft", {}, "/expert_weights_4.txt:1: no two-tab separator"},
      {"bad_esft_empty_line", "esft", {}, "/expert_weights_1.txt:2: empty line"},
      {"bad_esft_empty_ids", "esft", {}, "/expert_weights_1.txt:2: no expert ids before the two-tab separator"},
      {"bad_esft_empty", "esft", {}, ": the layer files hold no sequences"},
      {"bad_jsonl_malformed.jsonl", "jsonl", {}, ":3: not a valid JSON record: parse error"},
      {"bad_jsonl_not_object.jsonl", "jsonl", {}, ":2: expected a JSON object"},
      {"bad_jsonl_missing_field.jsonl", "jsonl", {}, ":2: missing field \"experts\""},
      {"bad_jsonl_missing_position.jsonl", "jsonl", {}, ":4: missing field \"token_idx\" or \"token_pos\""},
      {"bad_jsonl_missing_problem.jsonl", "jsonl", {}, ":1: missing field \"problem_id\""},
      {"bad_jsonl_wrong_type.jsonl", "jsonl", {}, ":5: \"layer\": expected an integer, got \"2\""},
      {"bad_jsonl_experts_type.jsonl", "jsonl", {}, ":6: \"experts\"[2]: expected an integer expert id, got \"x\""},
      {"bad_jsonl_id_range.jsonl", "jsonl", {}, ":3: \"experts\"[1]: expert id 64 is out of range, expected 0..63"},
      {"bad_jsonl_negative.jsonl", "jsonl", {}, ":7: \"experts\"[0]: expert id -2 is out of range"},
      {"bad_jsonl_duplicate.jsonl", "jsonl", {}, ":4: layer 1: expert 0 appears twice"},
      {"bad_jsonl_top_k.jsonl", "jsonl", {}, ":2: \"experts\": 5 ids, expected top_k = 6"},
      {"bad_jsonl_not_moe_layer.jsonl", "jsonl", {}, ":3: \"layer\": 0 is not an MoE layer of tiny-dsv2"},
      {"bad_jsonl_huge.jsonl", "jsonl", {}, ":5: \"token_idx\": 99999999999 is out of range"},
      {"bad_jsonl_mixed_weights.jsonl", "jsonl", {}, ":6: lacks \"gating_probs\", but the first record (line 1) has"},
      {"bad_jsonl_probs_length.jsonl", "jsonl", {}, ":8: \"gating_probs\": expected an array of 6 numbers"},
      {"bad_jsonl_empty.jsonl", "jsonl", {}, ": empty file"},
      {"bad_jsonl_missing_layer_strict.jsonl", "jsonl", {"--strict"},
       ":54: the token at position 5 of the sequence (dataset \"intent\", problem_id 1) lacks MoE layer 3"},
      {"bad_npy_fortran.npy", "npy", {}, ": npy header: fortran_order is True"},
      {"bad_npy_float.npy", "npy", {}, ": npy dtype \"<f4\" is not an integer type"},
      {"bad_npy_bigendian.npy", "npy", {}, ": npy dtype \">i4\" is big-endian"},
      {"bad_npy_truncated.npy", "npy", {}, ": byte offset 128: the data holds 756 bytes, expected 768"},
      {"bad_npy_id_range.npy", "npy", {}, ": byte offset 248: element [1, 1, 0] (token 1, MoE layer 2): expert id 64"},
      {"bad_npy_negative.npy", "npy", {}, ": byte offset 178: element [2, 0, 2] (token 2, MoE layer 1): expert id -1"},
      {"bad_npy_duplicate.npy", "npy", {}, ": byte offset 152: elements [0, 2, :] (token 0, MoE layer 3): expert 4 "
                                           "appears twice"},
      {"bad_npy_layers.npy", "npy", {}, ": npy shape (4, 3, 8): 3 layers, but tiny-dsv2 has 4 MoE layers"},
      {"bad_npy_ndim.npy", "npy", {}, ": npy shape (96): expected [tokens, layers]"},
      {"bad_npy_magic.npy", "npy", {}, ": byte offset 0: not a NumPy .npy file"},
      {"bad_npy_empty.npy", "npy", {}, ": empty file"},
      {"bad_trace_flipped.mtr", "", {}, ": byte offset 210: block 0 (payload bytes 226..4833): CRC-32 mismatch"},
      {"bad_trace_truncated.mtr", "", {}, ": byte offset 4794: no trailer at the end of the file"},
      {"bad_trace_magic.mtr", "", {}, ": byte offset 0: not a moesim trace"},
      {"bad_trace_version.mtr", "", {}, ": byte offset 8: format version 2, this moesim reads version 1"},
      {"bad_trace_empty.mtr", "", {}, ": empty file"},
      {"bad_trace_text_id.txt", "", {}, ":5: layer 1: expert id 1 of 6: \"64\" is out of range"},
      {"bad_trace_text_duplicate.txt", "", {}, ":6: layer 1: expert 0 appears twice"},
      {"bad_trace_text_not_integer.txt", "", {}, ":4: layer 1: expert id 1 of 6: expected a non-negative integer"},
      {"bad_trace_text_ragged.txt", "", {}, ":7: layer 4: expected \"|\", got the end of the line"},
      {"bad_trace_text_meta.txt", "", {}, ":2: metadata: not valid JSON"},
      {"bad_trace_text_truncated.txt", "", {}, ": the last line is not the end line"},
  };
  return cases;
}

}  // namespace

TEST_CASE("trace import cli: every bad input exits 2, names the file and line or offset, and writes nothing") {
  std::set<std::string> covered;
  for (const auto& c : bad_cases()) {
    CAPTURE(c.input);
    TempDir out;
    const std::string input = (data() / c.input).string();
    const fs::path output = out / (std::string(c.format).empty() ? "out.txt" : "out.mtr");
    std::vector<std::string> args;
    if (std::string(c.format).empty()) {
      args = {"trace", "convert", input, "-o", output.string()};
    } else {
      args = {"trace", "import", "--format", c.format, "--architecture", tiny(), input, "-o", output.string()};
    }
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    const CliResult r = run_moesim(args);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.err.find(input + c.expect) != std::string::npos, r.err);
    CHECK(r.out.empty());
    CHECK_FALSE(fs::exists(output));
    CHECK(fs::is_empty(out.path()));  // no temporary file left behind either
    covered.insert(c.input);
  }
  // Every bad_* sample in the folder is exercised here.
  for (const auto& entry : fs::directory_iterator(data())) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("bad_")) CHECK_MESSAGE(covered.count(name) == 1, name << " has no test");
  }
}

TEST_CASE("trace import cli: the ESFT sample imports to exactly the documented bytes, and reports its numbers") {
  TempDir out;
  const fs::path mtr = out / "s.mtr";
  CliResult r = run_moesim({"trace", "import", "--format", "esft", "--architecture", tiny(),
                            (data() / "esft_small").string(), "-o", mtr.string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("imported 36 tokens in 3 sequences") != std::string::npos);
  CHECK(r.out.find("dropped 0 tokens") != std::string::npos);
  CHECK(r.out.find("binary, 4,866 bytes") != std::string::npos);
  // sample_small.mtr was encoded by make_samples.py from FORMAT.md alone.
  CHECK(read_text(mtr) == read_text(data() / "sample_small.mtr"));

  // An existing output needs --force and is left untouched without it.
  moesim::testing::write_text(out / "old.mtr", "precious");
  r = run_moesim({"trace", "import", "--format", "esft", "--architecture", tiny(), (data() / "esft_small").string(),
                  "-o", (out / "old.mtr").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--force") != std::string::npos);
  CHECK(read_text(out / "old.mtr") == "precious");
  r = run_moesim({"trace", "import", "--format", "esft", "--architecture", tiny(), (data() / "esft_small").string(),
                  "-o", (out / "old.mtr").string(), "--force"});
  CHECK(r.exit_code == 0);
  CHECK(read_text(out / "old.mtr") == read_text(data() / "sample_small.mtr"));

  // A failed import with --force keeps the old file too.
  r = run_moesim({"trace", "import", "--format", "esft", "--architecture", tiny(),
                  (data() / "bad_esft_ragged").string(), "-o", (out / "old.mtr").string(), "--force"});
  CHECK(r.exit_code == 2);
  CHECK(read_text(out / "old.mtr") == read_text(data() / "sample_small.mtr"));
}

TEST_CASE("trace import cli: jsonl drops incomplete tokens and counts them, npy notes top-1 routing") {
  TempDir out;
  CliResult r = run_moesim({"trace", "import", "--format", "jsonl", "--architecture", tiny(),
                            (data() / "bad_jsonl_missing_layer_strict.jsonl").string(), "-o",
                            (out / "j.txt").string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("imported 35 tokens in 3 sequences") != std::string::npos);
  CHECK(r.out.find("dropped 1 tokens; 1: missing some MoE layers") != std::string::npos);
  CHECK(r.out.find("(text, ") != std::string::npos);
  r = run_moesim({"trace", "import", "--format", "npy", "--architecture", tiny(),
                  (data() / "routing_top1_u1.npy").string(), "-o", (out / "n.mtr").string(), "--sequence-length",
                  "12"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("imported 36 tokens in 3 sequences") != std::string::npos);
  CHECK(r.out.find("note: the array holds top-1 routing of a top-6 model") != std::string::npos);
}

TEST_CASE("trace import cli: usage mistakes exit 2 with a hint") {
  TempDir out;
  const std::string o = (out / "x.mtr").string();
  CliResult r = run_moesim({"trace", "import", "--format", "jsnl", "--architecture", tiny(),
                            (data() / "routing_small.jsonl").string(), "-o", o});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("did you mean \"jsonl\"") != std::string::npos);
  r = run_moesim({"trace", "import", "--format", "esft", (data() / "esft_small").string(), "-o", o});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("architecture") != std::string::npos);
  r = run_moesim({"trace", "import", "--format", "esft", "--architecture", tiny(), (data() / "esft_small").string(),
                  "-o", o, "--strict"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--strict applies to --format jsonl only") != std::string::npos);
  r = run_moesim({"trace", "convert", (data() / "sample_small.mtr").string(), "-o", o, "--encoding", "txt"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("expected text or binary") != std::string::npos);
  r = run_moesim({"trace", "split", (data() / "sample_small.mtr").string(), "--profile-out", o, "--heldout-out",
                  (out / "h.mtr").string(), "--fraction", "1.5"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("strictly between 0 and 1") != std::string::npos);
  CHECK(fs::is_empty(out.path()));
  r = run_moesim({"trace", "import", "--help"});
  CHECK(r.exit_code == 0);
  // One usage form per kind of input, each naming only the options that apply to it.
  CHECK(r.out.rfind("usage: moesim trace import --format esft|jsonl|npy --architecture NAME INPUT -o OUT.mtr", 0) == 0);
  CHECK(r.out.find("\n   or: moesim trace import --format sglang-routed|sglang-per-token --architecture NAME DUMP "
                   "[--expert-map MAP.json] -o OUT.mtr") != std::string::npos);
  CHECK(r.out.find("\n   or: moesim trace import --format megatron-router-trace --architecture NAME DUMP -o OUT.mtr") !=
        std::string::npos);
  CHECK(r.out.find("\n   or: moesim trace import --format counts|sglang-stat --architecture NAME INPUT -o OUT.mlt") !=
        std::string::npos);
  CHECK(r.out.find("\n   or: moesim trace import --format vllm-eplb|trtllm-expert-statistic --architecture NAME DUMP "
                   "[--expert-map MAP.json] -o OUT.mlt") != std::string::npos);
  // A command with several forms does not quote one of them in an error: it points to its --help.
  r = run_moesim({"trace", "import", "--format", "npy"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("see moesim trace import --help for its usage") != std::string::npos);
}

// The serving-engine samples (tests/data/traces/engines/, make_engine_samples.py) as a user imports them.
TEST_CASE("trace import cli: engine outputs import (routes or load-only), and broken ones exit 2 naming the record") {
  TempDir out;
  const fs::path engines = data() / "engines";
  struct Good {
    const char* format;
    const char* input;
    std::vector<std::string> extra;
    const char* output;
    const char* expect;  // in the report
  };
  const std::vector<Good> goods = {
      {"sglang-routed", "sglang_routed.jsonl", {}, "r.mtr", "imported 14 tokens in 3 sequences"},
      {"sglang-routed", "sglang_routed_physical.jsonl", {"--expert-map", (engines / "sglang_expert_map.json").string()},
       "p.mtr", "imported 9 tokens in 1 sequences"},
      {"sglang-per-token", "sglang_per_token.json", {}, "t.txt", "imported 7 tokens in 4 sequences"},
      {"megatron-router-trace", "megatron_router_trace_rank0.jsonl", {}, "m.mtr", "imported 12 tokens in 3 sequences"},
      {"sglang-stat", "sglang_stat.json", {}, "s.mlt", "imported 3 iterations, 22 tokens (3 to 12 per iteration)"},
      {"vllm-eplb", "vllm_eplb_state.json", {}, "v.mlt", "imported 3 iterations, 11 tokens (2 to 5 per iteration)"},
      {"trtllm-expert-statistic", "trtllm_expert_statistic", {}, "trt.mlt",
       "imported 3 iterations, 10 tokens (1 to 6 per iteration)"},
  };
  for (const auto& g : goods) {
    CAPTURE(g.input);
    std::vector<std::string> args = {"trace", "import", "--format", g.format, "--architecture", tiny(),
                                     (engines / g.input).string(), "-o", (out / g.output).string()};
    args.insert(args.end(), g.extra.begin(), g.extra.end());
    const CliResult r = run_moesim(args);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK_MESSAGE(r.out.find(g.expect) != std::string::npos, r.out);
    const CliResult stats = run_moesim({"trace", "stats", (out / g.output).string()});
    CHECK_MESSAGE(stats.exit_code == 0, stats.err);
  }
  // Broken: physical slots without the map; a torch pickle; the map on a load-only format.
  const std::string physical = (engines / "sglang_routed_physical.jsonl").string();
  CliResult r = run_moesim({"trace", "import", "--format", "sglang-routed", "--architecture", tiny(), physical, "-o",
                            (out / "bad.mtr").string()});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.err.find(physical + ":1: meta_info.routed_experts: token 0") != std::string::npos, r.err);
  CHECK(r.err.find("--expert-map") != std::string::npos);
  CHECK_FALSE(fs::exists(out / "bad.mtr"));
  const fs::path pt = out / "expert_distribution_recorder_1.pt";
  moesim::testing::write_text(pt, std::string("\x80\x02}q\x00", 5));
  r = run_moesim({"trace", "import", "--format", "sglang-stat", "--architecture", tiny(), pt.string(), "-o",
                  (out / "bad.mlt").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find(pt.string() + ": a Python pickle (torch.save), which moesim does not read") != std::string::npos);
  CHECK_FALSE(fs::exists(out / "bad.mlt"));
  r = run_moesim({"trace", "import", "--format", "sglang-stat", "--architecture", tiny(),
                  (engines / "sglang_stat.json").string(), "-o", (out / "bad.mlt").string(), "--expert-map",
                  (engines / "sglang_expert_map.json").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--expert-map does not apply to --format sglang-stat") != std::string::npos);
  CHECK_FALSE(fs::exists(out / "bad.mlt"));
}

TEST_CASE("trace import cli: convert goes text <-> binary byte for byte") {
  TempDir out;
  CliResult r = run_moesim({"trace", "convert", (data() / "sample_small.mtr").string(), "-o",
                            (out / "s.txt").string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("converted 36 tokens in 3 sequences") != std::string::npos);
  CHECK(read_text(out / "s.txt") == read_text(data() / "sample_small.txt"));
  r = run_moesim({"trace", "convert", (out / "s.txt").string(), "-o", (out / "s.bin").string(), "--encoding",
                  "binary"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(read_text(out / "s.bin") == read_text(data() / "sample_small.mtr"));
  r = run_moesim({"trace", "convert", (out / "s.txt").string(), "-o", (out / "s.txt").string(), "--force"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("is the input file") != std::string::npos);
}

TEST_CASE("trace import cli: split of the shipped trace is seeded, deterministic and complete") {
  const std::string shipped = (moesim::testing::source_dir() / "traces" / "data" / "deepseek-v2-lite-intent.mtr").string();
  TempDir out;
  auto split = [&](const std::string& tag, const std::string& seed) {
    return run_moesim({"trace", "split", shipped, "--profile-out", (out / (tag + "-p.mtr")).string(), "--heldout-out",
                       (out / (tag + "-h.txt")).string(), "--seed", seed, "--fraction", "0.25"});
  };
  CliResult a = split("a", "7");
  REQUIRE_MESSAGE(a.exit_code == 0, a.err);
  CHECK(a.out.find("split 127 sequences (fraction 0.25, seed 7)") != std::string::npos);
  CHECK(a.out.find("profile:  32 sequences") != std::string::npos);
  CHECK(a.out.find("held-out: 95 sequences") != std::string::npos);
  CliResult b = split("b", "7");
  REQUIRE(b.exit_code == 0);
  CHECK(read_text(out / "a-p.mtr") == read_text(out / "b-p.mtr"));
  CHECK(read_text(out / "a-h.txt") == read_text(out / "b-h.txt"));
  CliResult c = split("c", "8");
  REQUIRE(c.exit_code == 0);
  CHECK(read_text(out / "a-p.mtr") != read_text(out / "c-p.mtr"));
  // Without --seed: seed 1, the default of every moesim command with a seed.
  CliResult d = run_moesim({"trace", "split", shipped, "--profile-out", (out / "d-p.mtr").string(), "--heldout-out",
                            (out / "d-h.txt").string(), "--fraction", "0.25"});
  REQUIRE(d.exit_code == 0);
  CHECK(d.out.find("seed 1)") != std::string::npos);
  CliResult e = split("e", "1");
  REQUIRE(e.exit_code == 0);
  CHECK(read_text(out / "d-p.mtr") == read_text(out / "e-p.mtr"));
  // The parts read back as traces whose counts add up to the whole.
  CliResult pc = run_moesim({"trace", "convert", (out / "a-p.mtr").string(), "-o", (out / "p.txt").string()});
  CliResult hc = run_moesim({"trace", "convert", (out / "a-h.txt").string(), "-o", (out / "h.mtr").string()});
  REQUIRE(pc.exit_code == 0);
  REQUIRE(hc.exit_code == 0);
  auto tokens_of = [](const std::string& report) {
    const auto at = report.find("converted ") + 10;
    std::string digits;
    for (std::size_t i = at; i < report.size() && report[i] != ' '; ++i)
      if (report[i] != ',') digits += report[i];
    return std::stoull(digits);
  };
  CHECK(tokens_of(pc.out) + tokens_of(hc.out) == 8222);
  CHECK(pc.out.find("in 32 sequences") != std::string::npos);
  CHECK(hc.out.find("in 95 sequences") != std::string::npos);
}
