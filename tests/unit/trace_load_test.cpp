// Load-only traces (per-step expert counts): the file format round trip and its checks, the counts
// importer from .npy, .json and .csv (the shipped samples and files written here), every bad input
// named by file and entry, and the load statistics. Samples under tests/data/traces/ come from
// tests/data/traces/make_load_samples.py.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "common/error.hpp"
#include "common/hash.hpp"
#include "models/architecture.hpp"
#include "tests/support/test_support.hpp"
#include "traces/import.hpp"
#include "traces/load_stats.hpp"
#include "traces/load_trace.hpp"
#include "traces/sampling.hpp"
#include "traces/trace.hpp"

namespace fs = std::filesystem;
using namespace moesim;
using namespace moesim::traces;
using moesim::testing::error_of;
using moesim::testing::read_text;
using moesim::testing::TempDir;
using moesim::testing::write_text;

namespace {

fs::path samples() { return moesim::testing::test_data_dir() / "traces"; }
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Three MoE layers (decoder layers 1, 2, 4) of 4 experts, top-2: small enough to write by hand.
TraceShape small_shape() { return TraceShape{"small", {1, 2, 4}, 4, 2}; }
LoadTraceMeta small_meta() { return LoadTraceMeta{small_shape(), "written by a test", 0, 0}; }

// Counts of `tokens` tokens each routed to k distinct experts drawn at random, at every layer.
std::vector<std::uint32_t> random_counts(const TraceShape& shape, std::uint32_t tokens, std::uint64_t seed) {
  Rng rng(seed);
  const auto experts = static_cast<std::size_t>(shape.num_experts);
  std::vector<std::uint32_t> counts(shape.layers.size() * experts, 0);
  std::vector<std::size_t> deck(experts);
  for (std::size_t l = 0; l < shape.layers.size(); ++l)
    for (std::uint32_t t = 0; t < tokens; ++t) {
      std::iota(deck.begin(), deck.end(), std::size_t{0});
      shuffle(deck, rng);
      for (int j = 0; j < shape.top_k; ++j) ++counts[l * experts + deck[static_cast<std::size_t>(j)]];
    }
  return counts;
}

std::vector<std::vector<std::uint32_t>> read_all(LoadTraceReader& reader) {
  std::vector<std::vector<std::uint32_t>> out;
  std::vector<std::uint32_t> counts;
  while (reader.next(counts)) out.push_back(counts);
  return out;
}

void write_trace(const fs::path& path, const std::vector<std::vector<std::uint32_t>>& iterations,
                 const LoadTraceMeta& meta = small_meta()) {
  auto writer = create_load_trace_writer(path.string(), meta, false);
  for (const auto& it : iterations) writer->write(it);
  writer->finish();
}

// A .npy file: `code` is the dtype ("<i4", "<f8", ...), values given as doubles and stored as the dtype.
void write_npy(const fs::path& path, const std::string& code, const std::vector<std::size_t>& shape,
               const std::vector<double>& values) {
  std::string dims;
  for (std::size_t d : shape) dims += std::to_string(d) + ", ";
  std::string header = "{'descr': '" + code + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  header += std::string(64 - (10 + header.size() + 1) % 64, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  for (double v : values) {
    char buf[8];
    std::size_t n = 0;
    if (code == "<i4") {
      const auto x = static_cast<std::int32_t>(v);
      std::memcpy(buf, &x, n = 4);
    } else if (code == "<i8") {
      const auto x = static_cast<std::int64_t>(v);
      std::memcpy(buf, &x, n = 8);
    } else if (code == "<u2") {
      const auto x = static_cast<std::uint16_t>(v);
      std::memcpy(buf, &x, n = 2);
    } else if (code == "<f8") {
      std::memcpy(buf, &v, n = 8);
    } else if (code == "<f4") {
      const auto x = static_cast<float>(v);
      std::memcpy(buf, &x, n = 4);
    }
    out.append(buf, n);
  }
  write_text(path, out);
}

// Two iterations of the small shape, hand-made and top-k consistent: 3 tokens, then 2.
const std::vector<double>& good_values() {
  static const std::vector<double> v = {
      2, 1, 2, 1, /**/ 3, 0, 0, 3, /**/ 1, 1, 2, 2,   // iteration 0: 3 tokens x top-2 = 6 per layer
      1, 1, 1, 1, /**/ 2, 2, 0, 0, /**/ 0, 2, 0, 2};  // iteration 1: 2 tokens
  return v;
}

CountsImportReport import_file(const fs::path& input, const fs::path& output, const TraceShape& shape = small_shape()) {
  return import_counts(input.string(), shape, load_file_writer_factory(output.string(), false));
}

// The error an import of `input` gives; the output must not exist afterwards (nor any temporary file).
std::string import_error(const TempDir& dir, const fs::path& input) {
  const fs::path out = dir / "out.mlt";
  std::string e = error_of([&] { import_file(input, out); });
  CHECK_FALSE(fs::exists(out));
  for (const auto& entry : fs::directory_iterator(dir.path()))
    CHECK_MESSAGE(!entry.path().filename().string().starts_with(".out.mlt"), entry.path());
  return e;
}

std::string csv_of(const std::vector<std::string>& rows) {
  std::string out = "iteration,layer,c0,c1,c2,c3\n";
  for (const auto& r : rows) out += r + "\n";
  return out;
}

}  // namespace

TEST_CASE("load trace: a written trace reads back count for count, knows its size up front, and rewinds") {
  TempDir dir;
  const TraceShape shape = small_shape();
  std::vector<std::vector<std::uint32_t>> iterations;
  for (std::uint32_t i = 0; i < 5; ++i) iterations.push_back(random_counts(shape, 1 + i * 7, i));
  write_trace(dir / "t.mlt", iterations);
  CHECK(is_load_trace((dir / "t.mlt").string()));
  auto reader = open_load_trace((dir / "t.mlt").string());
  CHECK(reader->meta().shape.layers == shape.layers);
  CHECK(reader->meta().shape.num_experts == 4);
  CHECK(reader->meta().shape.top_k == 2);
  CHECK(reader->meta().source == "written by a test");
  CHECK(reader->meta().iterations == 5);
  CHECK(reader->meta().total_tokens == 1 + 8 + 15 + 22 + 29);
  CHECK(read_all(*reader) == iterations);
  reader->rewind();
  CHECK(read_all(*reader) == iterations);
  std::vector<std::uint32_t> counts;
  reader->rewind();
  REQUIRE(reader->next(counts));
  CHECK(load_tokens(shape, counts) == 1);
  CHECK_FALSE(is_load_trace((dir / "missing.mlt").string()));
  CHECK_FALSE(is_load_trace((samples() / "sample_small.mtr").string()));
}

TEST_CASE("load trace: the writer refuses an inconsistent iteration, naming the file, iteration and layer") {
  TempDir dir;
  const std::string path = (dir / "t.mlt").string();
  const std::vector<std::uint32_t> good = {2, 1, 2, 1, /**/ 1, 2, 1, 2, /**/ 1, 1, 2, 2};  // 3 tokens
  struct Case {
    std::vector<std::uint32_t> counts;
    std::string expect;
  };
  std::vector<std::uint32_t> odd = good, uneven = good, over = good, zero(12, 0), short_one(11, 1);
  odd[1] += 1;  // layer 0 sums to 7: not a multiple of top_k 2
  uneven[4] += 1;
  uneven[5] += 1;  // layer 1 sums to 8, while layer 0 says 3 tokens x top-2
  over = {4, 0, 1, 1, /**/ 2, 2, 1, 1, /**/ 2, 2, 1, 1};  // 3 tokens, but expert 0 of layer 1 has 4
  const std::vector<Case> cases = {
      {odd, path + ": writing iteration 1: MoE layer 1 (layer index 0): the counts sum to 7, not a multiple of "
                   "top_k = 2"},
      {uneven, path + ": writing iteration 1: MoE layer 2 (layer index 1): the counts sum to 8, but MoE layer 1 (layer "
                      "index 0)'s sum to 6 (3 tokens x top_k 2)"},
      {over, path + ": writing iteration 1: MoE layer 1 (layer index 0), expert 0: 4 tokens, more than the "
                    "iteration's 3"},
      {zero, path + ": writing iteration 1: MoE layer 1 (layer index 0): every count is 0"},
      {short_one, path + ": writing iteration 1: 11 counts, expected 3 layers x 4 experts = 12"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.expect);
    {
      auto writer = create_load_trace_writer(path, small_meta(), false);
      writer->write(good);
      const std::string e = error_of([&] { writer->write(c.counts); });
      CHECK_MESSAGE(e.starts_with(c.expect), e);
    }
    CHECK_FALSE(fs::exists(path));
    CHECK(fs::is_empty(dir.path()));
  }
  {
    auto writer = create_load_trace_writer(path, small_meta(), false);
    CHECK(contains(error_of([&] { writer->finish(); }), "no iterations were written"));
  }
  CHECK(fs::is_empty(dir.path()));
  LoadTraceMeta bad = small_meta();
  bad.shape.top_k = 5;
  CHECK(contains(error_of([&] { create_load_trace_writer(path, bad, false); }), "top_k is 5"));
}

TEST_CASE("load trace: an unfinished writer leaves no file, and an existing file needs overwrite") {
  TempDir dir;
  const fs::path path = dir / "t.mlt";
  {
    auto writer = create_load_trace_writer(path.string(), small_meta(), false);
    writer->write(random_counts(small_shape(), 2, 3));
  }
  CHECK(fs::is_empty(dir.path()));
  write_text(path, "precious");
  CHECK(contains(error_of([&] { create_load_trace_writer(path.string(), small_meta(), false); }), "--force"));
  CHECK(read_text(path) == "precious");
  write_trace(dir / "u.mlt", {random_counts(small_shape(), 2, 3)});
  auto writer = create_load_trace_writer(path.string(), small_meta(), true);
  writer->write(random_counts(small_shape(), 2, 3));
  writer->finish();
  CHECK(read_text(path) == read_text(dir / "u.mlt"));
}

TEST_CASE("load trace: corrupt, truncated, foreign and inconsistent files are refused, naming offset and iteration") {
  TempDir dir;
  const fs::path good = dir / "good.mlt";
  write_trace(good, {random_counts(small_shape(), 3, 1), random_counts(small_shape(), 4, 2)});
  const std::string bytes = read_text(good);
  const std::size_t header = 40 + (bytes.size() - 40 - 2 * 52);  // header and metadata; records of 12 x 4 + 4
  auto variant = [&](const std::string& name, std::string content) {
    write_text(dir / name, content);
    return (dir / name).string();
  };
  auto read_error = [](const std::string& path) {
    return error_of([&] {
      auto r = open_load_trace(path);
      read_all(*r);
    });
  };
  std::string flipped = bytes;
  flipped[header + 52 + 8] ^= 0x01;  // iteration 1, a count
  std::string p = variant("flipped.mlt", flipped);
  CHECK(contains(read_error(p), p + ": byte offset " + std::to_string(header + 52) + ": iteration 1: CRC-32 mismatch"));
  p = variant("truncated.mlt", bytes.substr(0, bytes.size() - 10));
  CHECK(contains(read_error(p), p + ": byte offset " + std::to_string(header) + ": the iteration records hold"));
  CHECK(contains(read_error(p), "(truncated?)"));
  p = variant("long.mlt", bytes + "x");
  CHECK(contains(read_error(p), "(trailing bytes)"));
  std::string meta = bytes;
  meta[45] ^= 0x20;
  p = variant("meta.mlt", meta);
  CHECK(contains(read_error(p), p + ": byte offset 0: header CRC-32 mismatch"));
  std::string version = bytes;
  version[8] = 2;
  p = variant("version.mlt", version);
  CHECK(contains(read_error(p), p + ": byte offset 8: load-only trace format version 2"));
  p = variant("short.mlt", bytes.substr(0, 20));
  CHECK(contains(read_error(p), "too short for a load-only trace"));
  CHECK(contains(read_error((samples() / "sample_small.mtr").string()), "not a load-only trace"));

  // A record whose CRC is right but whose counts break top-k consistency: the reader checks it too.
  std::string inconsistent = bytes;
  std::vector<std::uint32_t> counts(12);
  std::memcpy(counts.data(), inconsistent.data() + header, 48);
  counts[0] += 1;
  std::memcpy(inconsistent.data() + header, counts.data(), 48);
  const std::uint32_t crc = common::crc32(counts.data(), 48);
  std::memcpy(inconsistent.data() + header + 48, &crc, 4);
  p = variant("inconsistent.mlt", inconsistent);
  CHECK(contains(read_error(p), p + ": byte offset " + std::to_string(header) +
                                    ": iteration 0: MoE layer 1 (layer index 0): the counts sum to 7"));

  // open_trace knows the magic and says what the file is and where it can be used.
  const std::string e = error_of([&] { open_trace(good.string()); });
  CHECK(contains(e, good.string() + ": a load-only trace (per-step expert token counts, no per-token routes)"));
  CHECK(contains(e, "trace stats"));
}

TEST_CASE("load trace: the shipped sample holds the counts of the npy, json and csv samples") {
  auto reader = open_load_trace((samples() / "load_dsv2_lite.mlt").string());
  const TraceShape dsv2 = models::load_architecture("deepseek-v2-lite").trace_shape();
  CHECK(reader->meta().shape.layers == dsv2.layers);
  CHECK(reader->meta().shape.num_experts == 64);
  CHECK(reader->meta().shape.top_k == 6);
  CHECK(reader->meta().iterations == 4);
  CHECK(reader->meta().total_tokens == 64 + 63 + 63 + 73);
  const auto expected = read_all(*reader);
  TempDir dir;
  for (const char* name : {"counts_dsv2_lite.npy", "counts_dsv2_lite.json", "counts_dsv2_lite.csv"}) {
    CAPTURE(name);
    const fs::path out = dir / (std::string(name) + ".mlt");
    const CountsImportReport report = import_file(samples() / name, out, dsv2);
    CHECK(report.iterations == 4);
    CHECK(report.tokens == 263);
    CHECK(report.min_tokens == 63);
    CHECK(report.max_tokens == 73);
    auto imported = open_load_trace(out.string());
    CHECK(read_all(*imported) == expected);
    CHECK(imported->meta().source ==
          "counts import of " + std::string(name) + " (moesim trace import --format counts)");
  }
  // The npy import is the file make_load_samples.py encoded from FORMAT.md, byte for byte.
  CHECK(read_text(dir / "counts_dsv2_lite.npy.mlt") == read_text(samples() / "load_dsv2_lite.mlt"));
}

TEST_CASE("load trace import: npy dtypes, whole floats and both JSON layouts give the same counts") {
  TempDir dir;
  const std::vector<std::uint32_t> it0 = {2, 1, 2, 1, 3, 0, 0, 3, 1, 1, 2, 2};
  const std::vector<std::uint32_t> it1 = {1, 1, 1, 1, 2, 2, 0, 0, 0, 2, 0, 2};
  for (const char* code : {"<i4", "<i8", "<u2", "<f4", "<f8"}) {
    CAPTURE(code);
    write_npy(dir / "c.npy", code, {2, 3, 4}, good_values());
    const CountsImportReport r = import_file(dir / "c.npy", dir / "c.mlt");
    CHECK(r.iterations == 2);
    CHECK(r.tokens == 5);
    CHECK(r.input_kind == "npy");
    auto reader = open_load_trace((dir / "c.mlt").string());
    CHECK(read_all(*reader) == std::vector<std::vector<std::uint32_t>>{it0, it1});
    fs::remove(dir / "c.mlt");
  }
  write_text(dir / "bare.json", "[[[2,1,2,1],[3,0,0,3],[1,1,2,2]], [[1,1,1,1],[2,2,0,0],[0,2,0,2.0]]]");
  write_text(dir / "object.json", "{\"note\": \"ignored\", \"counts\": [[[2,1,2,1],[3,0,0,3],[1,1,2,2]], "
                                  "[[1,1,1,1],[2,2,0,0],[0,2,0,2]]]}");
  for (const char* name : {"bare.json", "object.json"}) {
    import_file(dir / name, dir / (std::string(name) + ".mlt"));
    auto reader = open_load_trace((dir / (std::string(name) + ".mlt")).string());
    CHECK(read_all(*reader) == std::vector<std::vector<std::uint32_t>>{it0, it1});
  }
  // CSV without a header, blank lines, spaces, layers in any order within an iteration, iterations
  // numbered from 7 (the trace keeps their order).
  write_text(dir / "c.csv", "7, 1, 3,0,0,3\n7,0,2,1,2,1\n\n7,2,1,1,2,2\n9,0,1,1,1,1\n9,1,2,2,0,0\n9,2,0,2,0,2e0\n");
  const CountsImportReport r = import_file(dir / "c.csv", dir / "csv.mlt");
  CHECK(r.input_kind == "csv");
  auto reader = open_load_trace((dir / "csv.mlt").string());
  CHECK(read_all(*reader) == std::vector<std::vector<std::uint32_t>>{it0, it1});
}

TEST_CASE("load trace import: every bad input names the file and the entry, and writes nothing") {
  TempDir dir;
  std::vector<double> v = good_values();
  auto npy_error = [&](const std::string& code, const std::vector<std::size_t>& shape,
                       const std::vector<double>& values) {
    write_npy(dir / "c.npy", code, shape, values);
    return import_error(dir, dir / "c.npy");
  };
  auto json_error = [&](const std::string& text) {
    write_text(dir / "c.json", text);
    return import_error(dir, dir / "c.json");
  };
  auto csv_error = [&](const std::string& text) {
    write_text(dir / "c.csv", text);
    return import_error(dir, dir / "c.csv");
  };
  const std::string npy = (dir / "c.npy").string(), json = (dir / "c.json").string(), csv = (dir / "c.csv").string();

  std::vector<double> negative = v;
  negative[17] = -1;  // iteration 1, layer 1, expert 1
  CHECK(contains(npy_error("<i4", {2, 3, 4}, negative),
                 npy + ": byte offset 196: element [1, 1, 1] (iteration 1, MoE layer 2, expert 1): count -1 is "
                       "negative"));
  std::vector<double> fraction = v;
  fraction[6] = 0.5;
  CHECK(contains(npy_error("<f8", {2, 3, 4}, fraction),
                 npy + ": byte offset 176: element [0, 1, 2] (iteration 0, MoE layer 2, expert 2): count 0.5 is not a "
                       "whole number"));
  std::vector<double> inconsistent = v;
  inconsistent[12] = 2;  // iteration 1, layer 0 now sums to 5
  CHECK(contains(npy_error("<i8", {2, 3, 4}, inconsistent),
                 npy + ": iteration 1 (elements [1, :, :]): MoE layer 1 (layer index 0): the counts sum to 5, not a "
                       "multiple of top_k = 2"));
  CHECK(contains(npy_error("<i4", {2, 3, 4}, inconsistent), "check that the array is iterations x layers x experts"));
  CHECK(contains(npy_error("<i4", {2, 4, 3}, v),
                 npy + ": npy shape (2, 4, 3): 4 layers x 3 experts, but small has 3 MoE layers (1, 2, 4) x 4 "
                       "experts"));
  CHECK(contains(npy_error("<i4", {2, 2, 6}, v), "2 layers x 6 experts, but small has 3 MoE layers"));
  CHECK(contains(npy_error("<i4", {0, 3, 4}, {}), npy + ": npy shape (0, 3, 4): the array is empty"));
  CHECK(contains(npy_error("<i4", {24}, v), npy + ": npy shape (24): expected [iterations, layers, experts]"));
  write_text(dir / "c.npy", read_text(samples() / "bad_npy_bigendian.npy"));
  CHECK(contains(import_error(dir, dir / "c.npy"), npy + ": npy dtype \">i4\" is big-endian"));

  CHECK(contains(json_error("[[[2,1,2,1],[3,0,0,3],[1,1,2,2]], [[1,1,1,1],[2,-2,0,0],[0,2,0,2]]]"),
                 json + ": entry [1, 1, 1] (iteration 1, MoE layer 2, expert 1): count -2 is negative"));
  CHECK(contains(json_error("[[[2,1,2,1],[3,0,0,3],[1,1,2,2.5]]]"),
                 json + ": entry [0, 2, 3] (iteration 0, MoE layer 4, expert 3): count 2.5 is not a whole number"));
  CHECK(contains(json_error("[[[2,1,2,1],[3,0,0,3],[1,1,2,\"2\"]]]"),
                 json + ": entry [0, 2, 3] (iteration 0, MoE layer 4, expert 3): expected a count"));
  CHECK(contains(json_error("[[[2,1,2,1],[3,0,0,3],[1,1,2,3]]]"),
                 json + ": [0] (iteration 0): MoE layer 4 (layer index 2): the counts sum to 7, but MoE layer 1"));
  CHECK(contains(json_error("[[[2,1,2,1],[3,0,0,3]]]"),
                 json + ": [0] (iteration 0): expected an array of 3 layers (small has 3 MoE layers (1, 2, 4) x 4 "
                        "experts), got 2 entries"));
  CHECK(contains(json_error("[[[2,1,2,1],[3,0,0,3],[1,1,2,2,0]]]"),
                 json + ": [0][2] (iteration 0, MoE layer 4): expected an array of 4 counts"));
  CHECK(contains(json_error("[]"), json + ": the array is empty"));
  CHECK(contains(json_error("{\"loads\": []}"), json + ": the JSON object has no key \"counts\""));
  CHECK(contains(json_error("[[[2,1,2,1],"), json + ": not valid JSON"));
  CHECK(contains(json_error(""), json + ": empty file"));

  CHECK(contains(csv_error(csv_of({"0,0,2,1,2,1", "0,1,3,0,-3,3", "0,2,1,1,2,2"})),
                 csv + ":3: field 5 (iteration 0, layer 1, MoE layer 2, expert 2): count -3 is negative"));
  CHECK(contains(csv_error(csv_of({"0,0,2,1,2,1", "0,1,3,0,0,3", "0,2,1,1,2,1.5"})),
                 csv + ":4: field 6 (iteration 0, layer 2, MoE layer 4, expert 3): count 1.5 is not a whole number"));
  CHECK(contains(csv_error(csv_of({"0,0,2,1,2,1", "0,1,3,0,0,3", "0,2,1,1,2,x"})),
                 csv + ":4: field 6 (iteration 0, layer 2, MoE layer 4, expert 3): expected a count"));
  CHECK(contains(csv_error(csv_of({"0,0,2,1,2,1", "0,1,3,0,0,1", "0,2,1,1,2,2"})),
                 csv + ":2: iteration 0: MoE layer 2 (layer index 1): the counts sum to 4, but MoE layer 1"));
  CHECK(contains(csv_error(csv_of({"0,0,2,1,2,1", "0,1,3,0,0,3,0"})),
                 csv + ":3: 7 fields, expected 6: iteration, layer and 4 counts (small has 4 experts)"));
  CHECK(contains(csv_error(csv_of({"0,0,2,1,2,1", "0,3,3,0,0,3"})),
                 csv + ":3: field 2 (layer): expected a layer index 0..2"));
  CHECK(contains(csv_error(csv_of({"0,0,2,1,2,1", "0,2,1,1,2,2", "1,0,1,1,1,1"})),
                 csv + ":2: iteration 0 has no row for layer 1 (MoE layer 2)"));
  CHECK(contains(csv_error(csv_of({"0,0,2,1,2,1", "0,0,2,1,2,1"})),
                 csv + ":3: iteration 0, layer 0 again (first on line 2)"));
  CHECK(contains(csv_error(csv_of({"1,0,2,1,2,1", "1,1,3,0,0,3", "1,2,1,1,2,2", "0,0,2,1,2,1"})),
                 csv + ":5: iteration 0 after iteration 1: rows must come grouped by iteration"));
  CHECK(contains(csv_error(csv_of({})), csv + ": no data rows"));

  write_text(dir / "c.txt", "1 2 3");
  CHECK(contains(import_error(dir, dir / "c.txt"), "unknown counts file type \".txt\"; expected .npy"));
  CHECK(contains(import_error(dir, dir / "missing.npy"), "missing.npy: no such file"));
}

TEST_CASE("load trace stats: loads, max/mean, per-step max/mean and drift from the counts") {
  TempDir dir;
  // Iteration 0: 3 tokens; iteration 1: 2 tokens (good_values()).
  write_npy(dir / "c.npy", "<i4", {2, 3, 4}, good_values());
  import_file(dir / "c.npy", dir / "c.mlt");
  auto reader = open_load_trace((dir / "c.mlt").string());
  const LoadTraceStats s = compute_load_stats(*reader);
  CHECK(s.iterations == 2);
  CHECK(s.tokens == 5);
  CHECK(s.first_half_iterations == 1);
  CHECK(s.tokens_per_iteration.min == 2);
  CHECK(s.tokens_per_iteration.max == 3);
  REQUIRE(s.layers.size() == 3);
  CHECK(s.layers[0].layer == 1);
  CHECK(s.layers[0].loads == std::vector<std::uint64_t>{3, 2, 3, 2});
  CHECK(s.layers[1].loads == std::vector<std::uint64_t>{5, 2, 0, 3});
  // Layer 2: 10 assignments over 4 experts, mean 2.5, max 5.
  CHECK(s.layers[1].max_mean == doctest::Approx(2.0));
  CHECK(s.layers[1].hottest_expert == 0);
  CHECK(s.layers[1].hottest_share == doctest::Approx(0.5));
  // Per step at layer 2: max 3 of mean 1.5, then max 2 of mean 1.
  CHECK(s.layers[1].step_max_mean_mean == doctest::Approx(2.0));
  CHECK(s.layers[1].step_max_mean_max == doctest::Approx(2.0));
  CHECK(s.layers[0].step_max_mean_max == doctest::Approx(2.0 / 1.5));
  // Layer 1: shares (2,1,2,1)/6 then (1,1,1,1)/4: TV = (1/12 + 1/12 + 1/12 + 1/12) / 2.
  CHECK(s.layers[0].drift_tv == doctest::Approx(1.0 / 6.0));
  CHECK(s.step_max_mean.count == 6);
}
