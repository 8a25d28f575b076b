// Serving-engine importers (traces/import_sglang.cpp) on the samples in tests/data/traces/engines/
// (written by make_engine_samples.py in the engines' own layouts): token and sequence counts, top-k,
// the decoder-layer -> MoE-layer mapping and the physical -> logical folding, each checked against the
// sample decoded here independently; then a broken variant of each sample gives an InputError naming
// the file and the record.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "models/architecture.hpp"
#include "tests/support/test_support.hpp"
#include "traces/import.hpp"
#include "traces/load_trace.hpp"
#include "traces/memory_trace.hpp"

namespace fs = std::filesystem;
using namespace moesim;
using namespace moesim::traces;
using moesim::testing::read_text;
using moesim::testing::TempDir;
using moesim::testing::write_text;
using nlohmann::json;

namespace {

fs::path engines() {
  return moesim::testing::test_data_dir() / "traces" / "engines";
}
models::Architecture tiny() {
  return models::load_architecture((moesim::testing::test_data_dir() / "traces" / "tiny-dsv2.yaml").string());
}

ImportOptions options_for(const models::Architecture& arch, const std::string& map = {}) {
  ImportOptions o;
  o.decoder_layers = arch.num_layers;
  o.expert_map_path = map;
  return o;
}

MemoryTrace import_routes(ImportFormat f, const fs::path& input, const ImportOptions& options,
                          ImportReport* report = nullptr) {
  MemoryTrace out;
  ImportReport r = import_trace(
      f, input.string(), tiny().trace_shape(), [&](const TraceMeta& m) { return write_memory_trace(out, m); }, options);
  if (report != nullptr) *report = r;
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const common::InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}
bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The test's own base64 reading (independent of the importer's).
std::vector<std::int32_t> int32_of_base64(const std::string& text) {
  const std::string abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<unsigned char> bytes;
  unsigned bits = 0, value = 0;
  for (char c : text) {
    if (c == '=') break;
    value = (value << 6) | static_cast<unsigned>(abc.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<unsigned char>((value >> bits) & 0xff));
    }
  }
  std::vector<std::int32_t> out(bytes.size() / 4);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::int32_t>(bytes[4 * i] | (bytes[4 * i + 1] << 8) | (bytes[4 * i + 2] << 16) |
                                       (static_cast<unsigned>(bytes[4 * i + 3]) << 24));
  return out;
}

// Every response of a sglang-routed sample, in file order (a batched line gives several).
std::vector<json> responses(const fs::path& path) {
  std::vector<json> out;
  std::istringstream in(read_text(path));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    json doc = json::parse(line);
    if (doc.is_array())
      for (auto& r : doc) out.push_back(r);
    else
      out.push_back(doc);
  }
  return out;
}

std::vector<std::vector<int>> map_of(const fs::path& path) {
  return json::parse(read_text(path)).at("physical_to_logical_map").get<std::vector<std::vector<int>>>();
}

// Checks `trace` against the responses: one sequence each, prompt + completion - 1 tokens, positions
// 0.., and at MoE layer l (decoder layer shape.layers[l]) the recorded ids (mapped when `p2l` is given).
void check_routed(const MemoryTrace& trace, const std::vector<json>& rs, const std::vector<std::vector<int>>& p2l) {
  const TraceShape shape = tiny().trace_shape();
  const std::size_t k = static_cast<std::size_t>(shape.top_k), decoder = 5;
  std::size_t token = 0;
  for (std::size_t s = 0; s < rs.size(); ++s) {
    const json& meta = rs[s].at("meta_info");
    const auto values = int32_of_base64(meta.at("routed_experts").get<std::string>());
    const std::size_t n =
        meta.at("prompt_tokens").get<std::size_t>() + meta.at("completion_tokens").get<std::size_t>() - 1;
    REQUIRE(values.size() == n * decoder * k);
    for (std::size_t t = 0; t < n; ++t, ++token) {
      REQUIRE(token < trace.tokens.size());
      CHECK(trace.tokens.sequence[token] == s);
      CHECK(trace.tokens.position[token] == t);
      for (std::size_t l = 0; l < shape.layers.size(); ++l) {
        const auto layer = static_cast<std::size_t>(shape.layers[l]);
        std::set<int> seen;
        for (std::size_t j = 0; j < k; ++j) {
          int want = values[(t * decoder + layer) * k + j];
          if (!p2l.empty()) want = p2l[layer][static_cast<std::size_t>(want)];
          const int got = trace.tokens.experts[(token * shape.layers.size() + l) * k + j];
          CHECK(got == want);
          seen.insert(got);
        }
        CHECK(seen.size() == k);  // top-k distinct
      }
    }
  }
  CHECK(token == trace.tokens.size());
}

}  // namespace

TEST_CASE("sglang-routed: each response is a sequence; the MoE layers are taken from num_hidden_layers rows") {
  ImportReport report;
  const auto arch = tiny();
  const MemoryTrace t =
      import_routes(ImportFormat::kSglangRouted, engines() / "sglang_routed.jsonl", options_for(arch), &report);
  const auto rs = responses(engines() / "sglang_routed.jsonl");
  REQUIRE(rs.size() == 3);
  std::size_t want = 0;
  for (const auto& r : rs)
    want +=
        r["meta_info"]["prompt_tokens"].get<std::size_t>() + r["meta_info"]["completion_tokens"].get<std::size_t>() - 1;
  CHECK(report.tokens == want);
  CHECK(t.meta.token_count == want);
  CHECK(report.sequences == 3);
  CHECK(report.dropped_tokens == 0);
  CHECK_FALSE(t.meta.has_weights);
  check_routed(t, rs, {});
}

TEST_CASE("sglang-routed: physical slots of redundant experts fold back to logical experts through --expert-map") {
  const auto arch = tiny();
  const fs::path input = engines() / "sglang_routed_physical.jsonl";
  const fs::path map = engines() / "sglang_expert_map.json";
  const MemoryTrace t = import_routes(ImportFormat::kSglangRouted, input, options_for(arch, map.string()));
  const auto rs = responses(input);
  check_routed(t, rs, map_of(map));
  // The sample does use redundant slots, so without the map the import must refuse it.
  const auto values = int32_of_base64(rs[0]["meta_info"]["routed_experts"].get<std::string>());
  REQUIRE(std::any_of(values.begin(), values.end(), [](std::int32_t v) { return v >= 64; }));
  const std::string e = error_of([&] { import_routes(ImportFormat::kSglangRouted, input, options_for(arch)); });
  CHECK(contains(e, input.string() + ":1: meta_info.routed_experts: token "));
  CHECK(contains(e, "--expert-map"));
}

TEST_CASE("sglang-routed: broken variants name the file, line and the fix") {
  TempDir dir;
  const auto arch = tiny();
  const std::string good = read_text(engines() / "sglang_routed.jsonl");
  const std::string first = good.substr(0, good.find('\n'));
  auto error_for = [&](const std::string& name, const std::string& text) {
    const fs::path p = dir / name;
    write_text(p, text);
    return error_of([&] { import_routes(ImportFormat::kSglangRouted, p, options_for(arch)); });
  };
  json r = json::parse(first);
  std::string b64 = r["meta_info"]["routed_experts"];
  // A bad base64 character on line 2.
  json bad = r;
  std::string starred = b64;
  starred[0] = '*';
  bad["meta_info"]["routed_experts"] = starred;
  std::string e = error_for("bad_char.jsonl", first + "\n" + bad.dump() + "\n");
  CHECK(contains(e, "bad_char.jsonl:2: meta_info.routed_experts: expected base64 text"));
  // Three int32 values fewer: no longer whole tokens of 5 layers x top-6.
  REQUIRE(b64.size() % 4 == 0);
  REQUIRE(b64.back() != '=');
  bad = r;
  bad["meta_info"]["routed_experts"] = b64.substr(0, b64.size() - 16);
  e = error_for("short.jsonl", bad.dump() + "\n");
  CHECK(contains(e, "short.jsonl:1: meta_info.routed_experts: 177 int32 values, not a whole number of tokens"));
  // No routed experts at all: the server flag is named.
  bad = r;
  bad["meta_info"].erase("routed_experts");
  e = error_for("missing.jsonl", bad.dump() + "\n");
  CHECK(contains(e, "missing.jsonl:1: no meta_info.routed_experts"));
  CHECK(contains(e, "--enable-return-routed-experts"));
  // The wrong architecture: mixtral has 32 decoder layers, top-2.
  const fs::path sample = engines() / "sglang_routed.jsonl";
  ImportOptions o;
  o.decoder_layers = 32;
  e = error_of([&] {
    MemoryTrace out;
    import_trace(
        ImportFormat::kSglangRouted, sample.string(), models::load_architecture("mixtral-8x7b").trace_shape(),
        [&](const TraceMeta& m) { return write_memory_trace(out, m); }, o);
  });
  CHECK(contains(e, sample.string() + ":1: meta_info.routed_experts: "));
  CHECK(contains(e, "pass the architecture the routing was recorded on"));
}

TEST_CASE("sglang-per-token: prefill requests and decode tokens become sequences, physical ids map to logical") {
  ImportReport report;
  const fs::path input = engines() / "sglang_per_token.json";
  const MemoryTrace t = import_routes(ImportFormat::kSglangPerToken, input, options_for(tiny()), &report);
  const json doc = json::parse(read_text(input));
  const auto p2l = doc.at("last_physical_to_logical_map").get<std::vector<std::vector<int>>>();
  const TraceShape shape = tiny().trace_shape();
  const std::size_t k = 6;
  std::size_t token = 0, sequences = 0;
  for (const json& rec : doc.at("records")) {
    const auto positions = rec.at("positions").get<std::vector<std::uint32_t>>();
    std::vector<std::size_t> lengths = rec.at("extend_seq_lens").is_null()
                                           ? std::vector<std::size_t>(positions.size(), 1)
                                           : rec.at("extend_seq_lens").get<std::vector<std::size_t>>();
    std::size_t i = 0;
    for (std::size_t len : lengths) {
      for (std::size_t end = i + len; i < end; ++i, ++token) {
        REQUIRE(token < t.tokens.size());
        CHECK(t.tokens.sequence[token] == sequences);
        CHECK(t.tokens.position[token] == positions[i]);
        for (std::size_t l = 0; l < shape.layers.size(); ++l) {
          const auto layer = static_cast<std::size_t>(shape.layers[l]);
          for (std::size_t j = 0; j < k; ++j) {
            const int phys = rec["topk_ids_of_layer"][layer][i][j].get<int>();
            CHECK(t.tokens.experts[(token * shape.layers.size() + l) * k + j] ==
                  p2l[layer][static_cast<std::size_t>(phys)]);
          }
        }
      }
      ++sequences;
    }
  }
  CHECK(token == t.tokens.size());
  CHECK(report.tokens == 7);  // 5 prefill tokens in 2 requests, then 2 decode tokens
  CHECK(report.sequences == sequences);
  CHECK(sequences == 4);
}

TEST_CASE("sglang-per-token: broken variants and a torch pickle name the file, record and fix") {
  TempDir dir;
  const json good = json::parse(read_text(engines() / "sglang_per_token.json"));
  auto error_for = [&](const std::string& name, const json& doc) {
    const fs::path p = dir / name;
    write_text(p, doc.dump());
    return error_of([&] { import_routes(ImportFormat::kSglangPerToken, p, options_for(tiny())); });
  };
  json bad = good;
  bad["records"][0]["extend_seq_lens"] = {3, 3};
  std::string e = error_for("lens.json", bad);
  CHECK(contains(e, "lens.json: records[0]: \"extend_seq_lens\" sum to 6 tokens, but the pass has 5"));
  bad = good;
  bad["records"][1]["topk_ids_of_layer"][2][0][7] = 5;  // an 7th expert past top-6
  e = error_for("columns.json", bad);
  CHECK(contains(e, "columns.json: records[1]: topk_ids_of_layer[2][0] (MoE layer 2): column 7"));
  bad = good;
  bad["last_physical_to_logical_map"][1][3] = 64;
  e = error_for("map.json", bad);
  CHECK(contains(
      e, "map.json: last_physical_to_logical_map: physical_to_logical_map[1][3]: expected a logical expert id"));
  // SGLang's own .pt file (a pickle) is refused with the conversion command.
  const fs::path pt = dir / "expert_distribution_recorder_1.pt";
  write_text(pt, std::string("\x80\x02}q\x00", 5));
  e = error_of([&] { import_routes(ImportFormat::kSglangPerToken, pt, options_for(tiny())); });
  CHECK(contains(e, pt.string() + ": a Python pickle"));
  CHECK(contains(e, "json.dump(torch.load("));
}

TEST_CASE("sglang-stat: logical_count passes become load-only iterations; empty buffer slots are skipped") {
  TempDir dir;
  const fs::path input = engines() / "sglang_stat.json";
  const fs::path out = dir / "stat.mlt";
  const auto arch = tiny();
  const CountsImportReport report = import_load_only(ImportFormat::kSglangStat, input.string(), arch.trace_shape(),
                                                     options_for(arch), load_file_writer_factory(out.string(), false));
  const json doc = json::parse(read_text(input));
  const TraceShape shape = arch.trace_shape();
  std::vector<std::vector<std::uint32_t>> want;  // per non-empty pass: [MoE layer][expert]
  std::uint64_t tokens = 0;
  for (const json& pass : doc.at("logical_count")) {
    std::vector<std::uint32_t> c;
    for (int layer : shape.layers)
      for (const json& v : pass[static_cast<std::size_t>(layer)]) c.push_back(v.get<std::uint32_t>());
    if (std::all_of(c.begin(), c.end(), [](std::uint32_t x) { return x == 0; })) continue;
    std::uint64_t first = 0;
    for (std::size_t e = 0; e < 64; ++e) first += c[e];
    tokens += first / 6;
    want.push_back(c);
  }
  REQUIRE(want.size() == 3);
  CHECK(report.iterations == want.size());
  CHECK(report.tokens == tokens);
  CHECK(report.min_tokens == 3);
  CHECK(report.max_tokens == 12);
  CHECK(std::any_of(report.notes.begin(), report.notes.end(),
                    [](const std::string& n) { return contains(n, "1 forward"); }));
  auto reader = open_load_trace(out.string());
  std::vector<std::uint32_t> counts;
  for (const auto& w : want) {
    REQUIRE(reader->next(counts));
    CHECK(counts == w);
  }
  CHECK_FALSE(reader->next(counts));
}

TEST_CASE("sglang-stat: broken variants name the file and the pass") {
  TempDir dir;
  const auto arch = tiny();
  const json good = json::parse(read_text(engines() / "sglang_stat.json"));
  auto error_for = [&](const std::string& name, const json& doc) {
    const fs::path p = dir / name;
    write_text(p, doc.dump());
    const fs::path out = dir / (name + ".mlt");
    std::string e = error_of([&] {
      import_load_only(ImportFormat::kSglangStat, p.string(), arch.trace_shape(), options_for(arch),
                       load_file_writer_factory(out.string(), false));
    });
    CHECK_FALSE(fs::exists(out));
    return e;
  };
  json bad = good;
  bad["logical_count"][1][2][5] = bad["logical_count"][1][2][5].get<int>() + 1;  // layer 2 no longer top-6 consistent
  std::string e = error_for("sum.json", bad);
  CHECK(contains(e, "sum.json: logical_count[1] (forward pass 1): "));
  bad = good;
  bad["logical_count"][0][0][3] = 4;  // tokens at the dense decoder layer 0
  e = error_for("dense.json", bad);
  CHECK(contains(e, "dense.json: logical_count[0][0][3]: 4 tokens at decoder layer 0, which is not an MoE layer"));
  bad = good;
  bad["logical_count"][3].erase(4);
  e = error_for("ragged.json", bad);
  CHECK(contains(e, "ragged.json: logical_count[3]: expected 5 layers"));
  e = error_for("per_token.json", json::parse(read_text(engines() / "sglang_per_token.json")));
  CHECK(contains(e, "use --format sglang-per-token"));
}

TEST_CASE("megatron-router-trace: each forward pass is a sequence, layers by decoder index, mtp records skipped") {
  ImportReport report;
  const fs::path input = engines() / "megatron_router_trace_rank0.jsonl";
  const MemoryTrace t = import_routes(ImportFormat::kMegatronRouterTrace, input, ImportOptions{}, &report);
  const TraceShape shape = tiny().trace_shape();
  const std::size_t k = 6, layers = shape.layers.size();
  // The passes, read here: a new pass when the step changes or a layer repeats.
  std::vector<std::vector<json>> passes;
  std::set<int> seen;
  std::int64_t step = -1;
  std::istringstream in(read_text(input));
  for (std::string line; std::getline(in, line);) {
    const json rec = json::parse(line);
    if (rec["block"] != "decoder") continue;
    if (rec["step"].get<std::int64_t>() != step || seen.count(rec["layer"].get<int>()) > 0) {
      passes.emplace_back();
      seen.clear();
      step = rec["step"].get<std::int64_t>();
    }
    seen.insert(rec["layer"].get<int>());
    passes.back().push_back(rec);
  }
  REQUIRE(passes.size() == 3);
  std::size_t token = 0;
  for (std::size_t s = 0; s < passes.size(); ++s) {
    const std::size_t n = passes[s].front()["num_tokens"].get<std::size_t>();
    for (std::size_t i = 0; i < n; ++i, ++token) {
      REQUIRE(token < t.tokens.size());
      CHECK(t.tokens.sequence[token] == s);
      CHECK(t.tokens.position[token] == i);
      for (const json& rec : passes[s]) {
        const int li = static_cast<int>(std::find(shape.layers.begin(), shape.layers.end(), rec["layer"].get<int>()) -
                                        shape.layers.begin());
        REQUIRE(li < static_cast<int>(layers));
        for (std::size_t j = 0; j < k; ++j)
          CHECK(t.tokens.experts[(token * layers + static_cast<std::size_t>(li)) * k + j] ==
                rec["top_indices"][i][j].get<int>());
      }
    }
  }
  CHECK(token == t.tokens.size());
  CHECK(report.tokens == 12);
  CHECK(report.sequences == 3);
  CHECK(std::any_of(report.notes.begin(), report.notes.end(),
                    [](const std::string& n) { return contains(n, "1 multi-token"); }));
}

TEST_CASE("megatron-router-trace: broken variants name the file, line and the fix") {
  TempDir dir;
  std::vector<std::string> lines;
  {
    std::istringstream in(read_text(engines() / "megatron_router_trace_rank0.jsonl"));
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  auto error_for = [&](const std::string& name, std::size_t at, const json& replacement) {
    std::string text;
    for (std::size_t i = 0; i < lines.size(); ++i) text += (i == at ? replacement.dump() : lines[i]) + "\n";
    const fs::path p = dir / name;
    write_text(p, text);
    return error_of([&] { import_routes(ImportFormat::kMegatronRouterTrace, p, ImportOptions{}); });
  };
  json rec = json::parse(lines[1]);
  rec["top_indices"][0][2] = 64;
  std::string e = error_for("range.jsonl", 1, rec);
  CHECK(contains(e, "range.jsonl:2: \"top_indices\"[0][2]: expected an expert id 0..63, got 64"));
  rec = json::parse(lines[2]);
  rec["top_indices"].erase(0);
  rec["num_tokens"] = 4;
  e = error_for("tokens.jsonl", 2, rec);
  CHECK(contains(e, "tokens.jsonl:3: layer 3 has 4 tokens, but the forward pass that started at line 1 has 5"));
  rec = json::parse(lines[0]);
  rec["layer"] = 0;
  e = error_for("dense.jsonl", 0, rec);
  CHECK(contains(e, "dense.jsonl:1: \"layer\": 0 is not an MoE layer of tiny-dsv2"));
  rec = json::parse(lines[0]);
  rec["topk"] = 8;
  e = error_for("topk.jsonl", 0, rec);
  CHECK(contains(e, "topk.jsonl:1: \"topk\": 8, but tiny-dsv2 routes top_k = 6"));
}

TEST_CASE("vllm-eplb: the load window folds physical to logical experts, oldest pass first, empty slots skipped") {
  TempDir dir;
  const fs::path input = engines() / "vllm_eplb_state.json";
  const fs::path out = dir / "v.mlt";
  const auto arch = tiny();
  const CountsImportReport report = import_load_only(ImportFormat::kVllmEplb, input.string(), arch.trace_shape(),
                                                     options_for(arch), load_file_writer_factory(out.string(), false));
  const json doc = json::parse(read_text(input));
  const auto window = doc.at("expert_load_window");
  const auto p2l = doc.at("physical_to_logical_map").get<std::vector<std::vector<int>>>();
  const std::size_t start = doc.at("expert_load_window_step").get<std::size_t>();
  std::vector<std::vector<std::uint32_t>> want;
  for (std::size_t i = 0; i < window.size(); ++i) {
    const json& pass = window[(start + i) % window.size()];
    std::vector<std::uint32_t> c(4 * 64, 0);
    for (std::size_t l = 0; l < 4; ++l)
      for (std::size_t p = 0; p < pass[l].size(); ++p)
        c[l * 64 + static_cast<std::size_t>(p2l[l][p])] += pass[l][p].get<std::uint32_t>();
    if (std::any_of(c.begin(), c.end(), [](std::uint32_t x) { return x != 0; })) want.push_back(c);
  }
  REQUIRE(want.size() == 3);
  CHECK(report.iterations == 3);
  CHECK(report.tokens == 11);
  auto reader = open_load_trace(out.string());
  std::vector<std::uint32_t> counts;
  for (const auto& w : want) {
    REQUIRE(reader->next(counts));
    CHECK(counts == w);
  }
  CHECK_FALSE(reader->next(counts));
  // The first iteration is slot 1 (the oldest), 4 tokens: every MoE layer sums to 4 x top-6.
  for (std::size_t l = 0; l < 4; ++l) {
    std::uint32_t sum = 0;
    for (std::size_t e = 0; e < 64; ++e) sum += want[0][l * 64 + e];
    CHECK(sum == 24);
  }
}

TEST_CASE("vllm-eplb: broken variants name the file and the pass") {
  TempDir dir;
  const auto arch = tiny();
  const json good = json::parse(read_text(engines() / "vllm_eplb_state.json"));
  auto error_for = [&](const std::string& name, const json& doc) {
    const fs::path p = dir / name;
    write_text(p, doc.dump());
    const fs::path out = dir / (name + ".mlt");
    std::string e = error_of([&] {
      import_load_only(ImportFormat::kVllmEplb, p.string(), arch.trace_shape(), options_for(arch),
                       load_file_writer_factory(out.string(), false));
    });
    CHECK_FALSE(fs::exists(out));
    return e;
  };
  json bad = good;
  bad.erase("physical_to_logical_map");
  std::string e = error_for("nomap.json", bad);
  CHECK(contains(e, "nomap.json: 72 physical experts but tiny-dsv2 has 64 logical experts"));
  CHECK(contains(e, "--expert-map"));
  bad = good;
  bad["expert_load_window"][3][1][0] = bad["expert_load_window"][3][1][0].get<int>() + 1;
  e = error_for("sum.json", bad);
  CHECK(contains(e, "sum.json: expert_load_window[3] (pass 2 from the oldest): "));
  bad = good;
  bad["expert_load_window_step"] = 4;
  e = error_for("step.json", bad);
  CHECK(contains(e, "step.json: \"expert_load_window_step\": expected an index into the window, got 4"));
}

TEST_CASE("trtllm-expert-statistic: safetensors tensors ITERATION_LAYER become iterations in order") {
  TempDir dir;
  const fs::path input = engines() / "trtllm_expert_statistic";
  const auto arch = tiny();
  const fs::path out = dir / "t.mlt";
  const CountsImportReport report =
      import_load_only(ImportFormat::kTrtllmExpertStatistic, input.string(), arch.trace_shape(), options_for(arch),
                       load_file_writer_factory(out.string(), false));
  // The test's own safetensors reading: header length, JSON header, I64 data.
  const std::string bytes = read_text(input / "rank0.safetensors");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  const json header = json::parse(bytes.substr(8, n));
  std::map<int, std::vector<std::uint32_t>> want;  // iteration -> [MoE layer][expert]
  for (const auto& [name, info] : header.items()) {
    const int iteration = std::stoi(name.substr(0, name.find('_')));
    const int layer = std::stoi(name.substr(name.find('_') + 1));
    auto& c = want[iteration];
    c.resize(4 * 64, 0);
    const std::size_t begin = 8 + n + info["data_offsets"][0].get<std::size_t>();
    for (std::size_t e = 0; e < 64; ++e) {
      std::int64_t v = 0;
      std::memcpy(&v, bytes.data() + begin + e * 8, 8);
      c[static_cast<std::size_t>(layer - 1) * 64 + e] = static_cast<std::uint32_t>(v);
    }
  }
  REQUIRE(want.size() == 3);
  CHECK(report.iterations == 3);
  CHECK(report.tokens == 10);
  auto reader = open_load_trace(out.string());
  std::vector<std::uint32_t> counts;
  for (const auto& entry : want) {
    const int iteration = entry.first;  // a plain variable: Clang's CAPTURE cannot take a structured binding
    CAPTURE(iteration);
    REQUIRE(reader->next(counts));
    CHECK(counts == entry.second);
  }
  CHECK_FALSE(reader->next(counts));
}

TEST_CASE("trtllm-expert-statistic: broken variants name the file, tensor or iteration and the fix") {
  TempDir dir;
  const auto arch = tiny();
  const fs::path good = engines() / "trtllm_expert_statistic";
  auto error_in = [&](const fs::path& folder) {
    return error_of([&] {
      import_load_only(ImportFormat::kTrtllmExpertStatistic, folder.string(), arch.trace_shape(), options_for(arch),
                       load_file_writer_factory((dir / "x.mlt").string(), true));
    });
  };
  // meta_info.json of a top-8 model.
  const fs::path a = dir / "topk";
  fs::create_directories(a);
  fs::copy_file(good / "rank0.safetensors", a / "rank0.safetensors");
  write_text(a / "meta_info.json", "{\"num_experts\": 64, \"num_experts_per_token\": 8}");
  std::string e = error_in(a);
  CHECK(contains(e, (a / "meta_info.json").string() + ": num_experts_per_token 8, but tiny-dsv2 routes top_k = 6"));
  // A file cut short: the data offsets no longer fit.
  const fs::path b = dir / "cut";
  fs::create_directories(b);
  const std::string bytes = read_text(good / "rank0.safetensors");
  write_text(b / "rank0.safetensors", bytes.substr(0, bytes.size() - 8));
  e = error_in(b);
  CHECK(contains(e, (b / "rank0.safetensors").string() + ": tensor \""));
  CHECK(contains(e, "do not hold 64 values of I64 inside the file"));
  // Load-balancer slots without a map.
  const fs::path c = dir / "slots";
  fs::create_directories(c);
  fs::copy_file(good / "rank0.safetensors", c / "rank0.safetensors");
  write_text(c / "meta_info.json", "{\"num_experts\": 72, \"num_experts_per_token\": 6}");
  e = error_in(c);
  CHECK(contains(e, "num_experts 72, but tiny-dsv2 has 64 experts"));
  CHECK(contains(e, "--expert-map"));
}
