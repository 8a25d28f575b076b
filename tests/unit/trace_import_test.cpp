// Importers (esft, jsonl, npy) on the real ESFT trace and on small samples, the shipped trace, and
// splitting. Samples under tests/data/traces/ come from tests/data/traces/make_samples.py.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/error.hpp"
#include "models/architecture.hpp"
#include "tests/support/test_support.hpp"
#include "traces/format_common.hpp"
#include "traces/import.hpp"
#include "traces/memory_trace.hpp"
#include "traces/split.hpp"
#include "traces/trace.hpp"

namespace fs = std::filesystem;
using namespace moesim;
using namespace moesim::traces;
using moesim::testing::TempDir;

namespace {

fs::path esft_dir() { return moesim::testing::shared_data_dir() / "routing" / "deepseek-v2-lite-intent"; }
fs::path samples() { return moesim::testing::test_data_dir() / "traces"; }

TraceShape dsv2_shape() { return models::load_architecture("deepseek-v2-lite").trace_shape(); }
// The test architecture of the samples: DeepSeek-V2-Lite cut to MoE layers 1..4.
TraceShape tiny_shape() { return models::load_architecture((samples() / "tiny-dsv2.yaml").string()).trace_shape(); }

MemoryTrace import_to_memory(ImportFormat f, const fs::path& input, const TraceShape& shape,
                             const ImportOptions& options = {}, ImportReport* report = nullptr) {
  MemoryTrace out;
  ImportReport r = import_trace(
      f, input.string(), shape, [&](const TraceMeta& m) { return write_memory_trace(out, m); }, options);
  if (report != nullptr) *report = r;
  return out;
}

void check_same_tokens(const MemoryTrace& a, const MemoryTrace& b) {
  CHECK(a.meta.shape.layers == b.meta.shape.layers);
  CHECK(a.meta.token_count == b.meta.token_count);
  CHECK(a.meta.sequence_count == b.meta.sequence_count);
  CHECK(a.tokens.sequence == b.tokens.sequence);
  CHECK(a.tokens.position == b.tokens.position);
  CHECK(a.tokens.experts == b.tokens.experts);
  CHECK(a.tokens.weights == b.tokens.weights);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const common::InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

// Line `line` (0-based) of an ESFT layer file, parsed independently of the importer.
std::pair<std::vector<int>, std::vector<float>> esft_line(const fs::path& file, std::size_t line) {
  std::ifstream in(file);
  std::string text;
  for (std::size_t i = 0; i <= line; ++i) std::getline(in, text);
  const std::size_t sep = text.find("\t\t");
  std::istringstream ids(text.substr(0, sep)), ws(text.substr(sep + 2));
  std::pair<std::vector<int>, std::vector<float>> out;
  for (int v; ids >> v;) out.first.push_back(v);
  for (float v; ws >> v;) out.second.push_back(v);
  return out;
}

}  // namespace

TEST_CASE("trace import: the full ESFT trace has 8222 tokens in 127 sequences, every id where the files put it") {
  MOESIM_REQUIRE_SHARED_DATA();
  const TraceShape shape = dsv2_shape();
  ImportReport report;
  MemoryTrace t = import_to_memory(ImportFormat::kEsft, esft_dir(), shape, {}, &report);
  CHECK(report.tokens == 8222);
  CHECK(report.sequences == 127);
  CHECK(report.dropped_tokens == 0);
  CHECK(t.meta.token_count == 8222);
  CHECK(t.meta.sequence_count == 127);
  CHECK(t.meta.has_weights);
  CHECK(t.meta.shape.layers.size() == 26);
  CHECK(t.meta.shape.layers.front() == 1);
  CHECK(t.tokens.experts.size() == 8222u * 26 * 6);
  // Sequence i is line i; token t of it sits at the same place in every layer file.
  const std::size_t per = ids_per_token(shape);
  std::size_t first_of_seq = 0;
  for (std::size_t i = 0; i < t.tokens.size(); ++i)
    if (t.tokens.sequence[i] == 100) {
      first_of_seq = i;
      break;
    }
  REQUIRE(t.tokens.position[first_of_seq] == 0);
  for (int layer : {1, 13, 26}) {
    auto [ids, ws] = esft_line(esft_dir() / ("expert_weights_" + std::to_string(layer) + ".txt"), 100);
    const std::size_t tokens = ids.size() / 6;
    REQUIRE(tokens > 3);
    const std::size_t l = static_cast<std::size_t>(layer - 1);
    bool same = true;
    for (std::size_t tok = 0; tok < tokens; ++tok)
      for (std::size_t j = 0; j < 6; ++j) {
        const std::size_t at = (first_of_seq + tok) * per + l * 6 + j;
        same = same && t.tokens.experts[at] == ids[tok * 6 + j] && t.tokens.weights[at] == ws[tok * 6 + j];
      }
    CHECK_MESSAGE(same, "layer " << layer);
    CHECK(t.tokens.sequence[first_of_seq + tokens - 1] == 100);
    CHECK(t.tokens.position[first_of_seq + tokens - 1] == tokens - 1);
  }
  // Independent facts about the data (SOURCES.md): max/mean expert load per layer.
  auto max_over_mean = [&](std::size_t l) {
    std::vector<double> load(64, 0.0);
    for (std::size_t i = 0; i < t.tokens.size(); ++i)
      for (std::size_t j = 0; j < 6; ++j) load[t.tokens.experts[i * per + l * 6 + j]] += 1;
    return *std::max_element(load.begin(), load.end()) / (8222.0 * 6 / 64);
  };
  CHECK(max_over_mean(0) == doctest::Approx(4.18).epsilon(0.002));
  CHECK(max_over_mean(1) == doctest::Approx(2.93).epsilon(0.002));
  CHECK(max_over_mean(21) == doctest::Approx(4.68).epsilon(0.002));
  CHECK(max_over_mean(25) == doctest::Approx(3.57).epsilon(0.002));
}

TEST_CASE("trace import: the real trace survives binary -> text -> binary unchanged") {
  MOESIM_REQUIRE_SHARED_DATA();
  TempDir dir;
  const TraceShape shape = dsv2_shape();
  import_esft(esft_dir().string(), shape, file_writer_factory((dir / "a.mtr").string(), Encoding::kBinary, false));
  MemoryTrace a = load_trace((dir / "a.mtr").string());
  save_trace(a, (dir / "b.txt").string(), Encoding::kText, false);
  MemoryTrace b = load_trace((dir / "b.txt").string());
  save_trace(b, (dir / "c.mtr").string(), Encoding::kBinary, false);
  MemoryTrace c = load_trace((dir / "c.mtr").string());
  check_same_tokens(a, b);
  check_same_tokens(a, c);
  CHECK(a.meta.source == c.meta.source);
  CHECK(moesim::testing::read_text(dir / "a.mtr") == moesim::testing::read_text(dir / "c.mtr"));
}

TEST_CASE("trace import: the shipped trace equals a fresh import of the shared ESFT data") {
  MOESIM_REQUIRE_SHARED_DATA();
  const fs::path shipped = moesim::testing::source_dir() / "traces" / "data" / "deepseek-v2-lite-intent.mtr";
  REQUIRE(fs::exists(shipped));
  TempDir dir;
  import_esft(esft_dir().string(), dsv2_shape(), file_writer_factory((dir / "fresh.mtr").string(), Encoding::kBinary,
                                                                     false));
  MemoryTrace fresh = load_trace((dir / "fresh.mtr").string());
  MemoryTrace ship = load_trace(shipped.string());
  check_same_tokens(fresh, ship);
  CHECK(ship.meta.shape.architecture == "deepseek-v2-lite");
  CHECK(ship.meta.source == fresh.meta.source);
}

TEST_CASE("trace import: the shipped trace begins with a fresh import of the shipped raw sample") {
  // tests/data/traces/esft-dsv2-lite-2seq: the first two lines of the raw ESFT files, byte for byte,
  // so that this runs from a fresh clone (the whole dump is checked above where ../shared/data is).
  const fs::path shipped = moesim::testing::source_dir() / "traces" / "data" / "deepseek-v2-lite-intent.mtr";
  ImportReport report;
  const MemoryTrace sample =
      import_to_memory(ImportFormat::kEsft, samples() / "esft-dsv2-lite-2seq", dsv2_shape(), {}, &report);
  REQUIRE(report.sequences == 2);
  REQUIRE(report.tokens > 100);
  const MemoryTrace ship = load_trace(shipped.string());
  const std::size_t n = sample.tokens.size();
  REQUIRE(ship.tokens.size() > n);
  const std::size_t ids = sample.tokens.experts.size() / n;  // MoE layers x top-k per token
  REQUIRE(ids == 26u * 6u);
  CHECK(std::equal(sample.tokens.sequence.begin(), sample.tokens.sequence.end(), ship.tokens.sequence.begin()));
  CHECK(std::equal(sample.tokens.position.begin(), sample.tokens.position.end(), ship.tokens.position.begin()));
  CHECK(std::equal(sample.tokens.experts.begin(), sample.tokens.experts.end(), ship.tokens.experts.begin()));
  CHECK(std::equal(sample.tokens.weights.begin(), sample.tokens.weights.end(), ship.tokens.weights.begin()));
  // The next token of the shipped trace starts its third sequence.
  CHECK(ship.tokens.sequence[n] != ship.tokens.sequence[n - 1]);
  CHECK(ship.tokens.position[n] == 0);
  // And the sample is the raw text: a token's ids in layer 1 as an independent parse reads them.
  const auto [first_ids, first_weights] = esft_line(samples() / "esft-dsv2-lite-2seq" / "expert_weights_1.txt", 0);
  REQUIRE(first_ids.size() >= 6);
  for (std::size_t k = 0; k < 6; ++k) CHECK(sample.tokens.experts[k] == first_ids[k]);
}

namespace {

// Records what an importer hands to its writer, to check it streams sequence by sequence.
class RecordingWriter final : public TraceWriter {
 public:
  RecordingWriter(std::vector<std::size_t>& sizes, bool& finished) : sizes_(sizes), finished_(finished) {}
  void write(const TokenBlock& block) override { sizes_.push_back(block.size()); }
  void finish() override { finished_ = true; }

 private:
  std::vector<std::size_t>& sizes_;
  bool& finished_;
};

MemoryTrace esft_sample() { return import_to_memory(ImportFormat::kEsft, samples() / "esft_small", tiny_shape()); }

}  // namespace

TEST_CASE("trace import: the samples in every input format hold the same routing as the ESFT sample") {
  const MemoryTrace esft = esft_sample();
  REQUIRE(esft.tokens.size() == 36);
  CHECK(esft.meta.sequence_count == 3);
  check_same_tokens(esft, load_trace((samples() / "sample_small.mtr").string()));
  check_same_tokens(esft, load_trace((samples() / "sample_small.txt").string()));

  ImportReport report;
  const MemoryTrace jsonl = import_to_memory(ImportFormat::kJsonl, samples() / "routing_small.jsonl", tiny_shape(),
                                             {}, &report);
  CHECK(report.tokens == 36);
  CHECK(report.sequences == 3);
  CHECK(report.dropped_tokens == 0);
  CHECK(jsonl.meta.has_weights);
  check_same_tokens(esft, jsonl);

  // Token-major records, string problem ids, token_pos, no weights.
  const MemoryTrace plain = import_to_memory(ImportFormat::kJsonl, samples() / "routing_no_weights.jsonl", tiny_shape());
  CHECK_FALSE(plain.meta.has_weights);
  CHECK(plain.tokens.weights.empty());
  CHECK(plain.tokens.experts == esft.tokens.experts);
  CHECK(plain.tokens.sequence == esft.tokens.sequence);
  CHECK(plain.tokens.position == esft.tokens.position);

  ImportOptions lengths;
  lengths.sequence_lengths_path = (samples() / "lengths_small.npy").string();
  for (const char* name : {"routing_small.npy", "routing_small_v2_u2.npy"}) {
    CAPTURE(name);
    const MemoryTrace n = import_to_memory(ImportFormat::kNpy, samples() / name, tiny_shape(), lengths);
    CHECK(n.tokens.experts == esft.tokens.experts);
    CHECK(n.tokens.sequence == esft.tokens.sequence);
    CHECK(n.tokens.position == esft.tokens.position);
    CHECK_FALSE(n.meta.has_weights);
  }
  ImportOptions fixed;
  fixed.sequence_length = 12;
  ImportReport top1_report;
  const MemoryTrace top1 = import_to_memory(ImportFormat::kNpy, samples() / "routing_top1_u1.npy", tiny_shape(), fixed,
                                            &top1_report);
  CHECK(top1.meta.shape.top_k == 1);
  CHECK(top1.tokens.sequence == esft.tokens.sequence);
  REQUIRE(top1.tokens.experts.size() == 36 * 4);
  for (std::size_t i = 0; i < top1.tokens.experts.size(); ++i) CHECK(top1.tokens.experts[i] == esft.tokens.experts[i * 6]);
  CHECK(top1_report.notes.size() == 1);
  // Without a sequence option the whole array is one sequence, positions 0..T-1.
  const MemoryTrace one = import_to_memory(ImportFormat::kNpy, samples() / "routing_small.npy", tiny_shape());
  CHECK(one.meta.sequence_count == 1);
  CHECK(one.tokens.position.back() == 35);
}

TEST_CASE("trace import: jsonl starts a new sequence on a repeated (sequence, token, layer) and drops partial tokens") {
  ImportReport report;
  const MemoryTrace rep = import_to_memory(ImportFormat::kJsonl, samples() / "routing_repeat.jsonl", tiny_shape(), {},
                                           &report);
  CHECK(report.sequences == 2);
  REQUIRE(rep.tokens.size() == 24);
  const std::size_t per = ids_per_token(tiny_shape());
  CHECK(std::equal(rep.tokens.experts.begin(), rep.tokens.experts.begin() + 12 * static_cast<std::ptrdiff_t>(per),
                   rep.tokens.experts.begin() + 12 * static_cast<std::ptrdiff_t>(per)));
  CHECK(rep.tokens.sequence[11] == 0);
  CHECK(rep.tokens.sequence[12] == 1);
  CHECK(rep.tokens.position[12] == 0);

  const fs::path partial = samples() / "bad_jsonl_missing_layer_strict.jsonl";
  const MemoryTrace dropped = import_to_memory(ImportFormat::kJsonl, partial, tiny_shape(), {}, &report);
  CHECK(report.tokens == 35);
  CHECK(report.dropped_tokens == 1);
  REQUIRE(report.dropped_by_reason.size() == 1);
  CHECK(report.dropped_by_reason[0].second == 1);
  // Sequence 1 lost position 5 only.
  std::vector<std::uint32_t> positions;
  for (std::size_t i = 0; i < dropped.tokens.size(); ++i)
    if (dropped.tokens.sequence[i] == 1) positions.push_back(dropped.tokens.position[i]);
  CHECK(positions == std::vector<std::uint32_t>{0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11});
  ImportOptions strict;
  strict.strict = true;
  CHECK(error_of([&] { import_to_memory(ImportFormat::kJsonl, partial, tiny_shape(), strict); })
            .find(partial.string() + ":54:") != std::string::npos);
}

TEST_CASE("trace import: importers stream one sequence at a time and finish only after the whole input") {
  for (auto [format, input] : {std::pair{ImportFormat::kEsft, samples() / "esft_small"},
                               std::pair{ImportFormat::kJsonl, samples() / "routing_small.jsonl"}}) {
    std::vector<std::size_t> sizes;
    bool finished = false;
    import_trace(format, input.string(), tiny_shape(),
                 [&](const TraceMeta&) { return std::make_unique<RecordingWriter>(sizes, finished); });
    CHECK(finished);
    CHECK(sizes == std::vector<std::size_t>{12, 12, 12});
  }
  // A bad input found after some sequences were written: the writer is never finished.
  std::vector<std::size_t> sizes;
  bool finished = false;
  CHECK_THROWS_AS(import_trace(ImportFormat::kEsft, (samples() / "bad_esft_ragged").string(), tiny_shape(),
                               [&](const TraceMeta&) { return std::make_unique<RecordingWriter>(sizes, finished); }),
                  common::InputError);
  CHECK(sizes.size() == 1);
  CHECK_FALSE(finished);
}

TEST_CASE("trace import: the ESFT importer checks the layer set against the architecture") {
  TraceShape wrong = tiny_shape();
  wrong.layers = {1, 2, 3, 4, 5};
  CHECK(error_of([&] { import_to_memory(ImportFormat::kEsft, samples() / "esft_small", wrong); })
            .find("missing the layer file for MoE layer 5") != std::string::npos);
  wrong.layers = {1, 2, 3};
  CHECK(error_of([&] { import_to_memory(ImportFormat::kEsft, samples() / "esft_small", wrong); })
            .find("expert_weights_4.txt: layer 4 is not an MoE layer") != std::string::npos);
  CHECK(error_of([&] { import_to_memory(ImportFormat::kEsft, samples() / "nowhere", tiny_shape()); })
            .find("does not exist") != std::string::npos);
  CHECK_THROWS_AS(parse_import_format("csv"), common::UsageError);
  CHECK(parse_import_format("npy") == ImportFormat::kNpy);
}

TEST_CASE("trace split: exact, seeded, platform-independent choice of whole sequences") {
  for (std::uint64_t s : {2u, 3u, 10u, 127u, 1000u}) {
    for (double f : {0.01, 0.25, 0.5, 0.99}) {
      auto chosen = choose_profile_sequences(s, f, 42);
      const auto m = static_cast<std::uint64_t>(std::count(chosen.begin(), chosen.end(), true));
      const auto want = std::clamp<std::uint64_t>(static_cast<std::uint64_t>(std::llround(f * static_cast<double>(s))),
                                                  1, s - 1);
      CHECK(m == want);
      CHECK(chosen == choose_profile_sequences(s, f, 42));
    }
  }
  CHECK(choose_profile_sequences(127, 0.5, 1) != choose_profile_sequences(127, 0.5, 2));
  // splitmix64 + Fisher-Yates as FORMAT.md defines them, computed by an independent Python
  // implementation of that text: seed 0, 10 sequences, fraction 0.3 -> sequences 2, 3, 6.
  const auto reference = choose_profile_sequences(10, 0.3, 0);
  CHECK(reference == std::vector<bool>{false, false, true, true, false, false, true, false, false, false});
  // The choice is a uniform sample: over many seeds each sequence is picked about fraction of the time.
  std::vector<int> picks(20, 0);
  for (std::uint64_t seed = 0; seed < 2000; ++seed) {
    auto c = choose_profile_sequences(20, 0.5, seed);
    for (std::size_t i = 0; i < 20; ++i) picks[i] += c[i] ? 1 : 0;
  }
  for (int p : picks) CHECK(std::abs(p - 1000) < 120);
  CHECK_THROWS_AS(choose_profile_sequences(10, 0.0, 0), common::UsageError);
  CHECK_THROWS_AS(choose_profile_sequences(10, 1.0, 0), common::UsageError);
  CHECK_THROWS_AS(choose_profile_sequences(1, 0.5, 0), common::InputError);
}

TEST_CASE("trace split: the parts of the shipped trace partition its sequences and keep their tokens intact") {
  const std::string shipped = (moesim::testing::source_dir() / "traces" / "data" / "deepseek-v2-lite-intent.mtr").string();
  const MemoryTrace whole = load_trace(shipped);
  MemoryTrace profile, heldout;
  auto reader = open_trace(shipped);
  SplitOptions options;
  options.fraction = 0.5;
  options.seed = 3;
  SplitReport report = split_trace(
      *reader, [&](const TraceMeta& m) { return write_memory_trace(profile, m); },
      [&](const TraceMeta& m) { return write_memory_trace(heldout, m); }, options);
  CHECK(report.sequences == 127);
  CHECK(report.profile_sequences == 64);
  CHECK(report.heldout_sequences == 63);
  CHECK(report.profile_tokens + report.heldout_tokens == 8222);
  CHECK(profile.meta.sequence_count == 64);
  CHECK(heldout.meta.sequence_count == 63);
  CHECK(profile.meta.source.find("split: profile part (fraction 0.5, seed 3)") != std::string::npos);
  std::map<std::uint32_t, std::size_t> whole_len, part_len;
  for (auto s : whole.tokens.sequence) ++whole_len[s];
  std::set<std::uint32_t> in_profile(profile.tokens.sequence.begin(), profile.tokens.sequence.end());
  for (auto s : heldout.tokens.sequence) CHECK(in_profile.count(s) == 0);
  for (auto s : profile.tokens.sequence) ++part_len[s];
  for (auto s : heldout.tokens.sequence) ++part_len[s];
  CHECK(part_len == whole_len);
  // Each part's tokens are the whole trace's tokens of those sequences, in order.
  const std::size_t per = ids_per_token(whole.meta.shape);
  std::size_t p = 0, h = 0;
  bool same = true;
  for (std::size_t i = 0; i < whole.tokens.size(); ++i) {
    const bool to_p = in_profile.count(whole.tokens.sequence[i]) == 1;
    const MemoryTrace& part = to_p ? profile : heldout;
    std::size_t& j = to_p ? p : h;
    same = same && part.tokens.position[j] == whole.tokens.position[i] &&
           std::equal(whole.tokens.experts.begin() + static_cast<std::ptrdiff_t>(i * per),
                      whole.tokens.experts.begin() + static_cast<std::ptrdiff_t>((i + 1) * per),
                      part.tokens.experts.begin() + static_cast<std::ptrdiff_t>(j * per)) &&
           part.tokens.weights[j * per] == whole.tokens.weights[i * per];
    ++j;
  }
  CHECK(same);
}
