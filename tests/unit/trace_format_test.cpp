// The trace encodings: round trips (binary, text, memory), streaming in slices, rewind, validation in
// writers and readers, corruption and truncation detection, atomic output.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "common/error.hpp"
#include "tests/support/test_support.hpp"
#include "traces/cached_reader.hpp"
#include "traces/format_binary.hpp"
#include "traces/format_common.hpp"
#include "traces/memory_trace.hpp"
#include "traces/trace.hpp"

namespace fs = std::filesystem;
using namespace moesim;
using namespace moesim::traces;
using moesim::testing::TempDir;

namespace {

// A random but valid trace: `sequences` sequences of 1..max_len tokens, distinct experts per layer.
MemoryTrace random_trace(int num_experts, std::vector<int> layers, int top_k, bool weights, int sequences,
                         int max_len, unsigned seed) {
  MemoryTrace t;
  t.meta.shape = {"test-arch", std::move(layers), num_experts, top_k};
  t.meta.has_weights = weights;
  t.meta.source = "unit test, seed " + std::to_string(seed);
  std::mt19937 rng(seed);
  std::vector<std::uint16_t> all(static_cast<std::size_t>(num_experts));
  for (int e = 0; e < num_experts; ++e) all[static_cast<std::size_t>(e)] = static_cast<std::uint16_t>(e);
  std::uniform_real_distribution<float> w(0.0f, 1.0f);
  auto below = [&](std::uint32_t m) { return static_cast<std::uint32_t>(rng() % m); };
  std::uint32_t seq_id = 0;
  for (int s = 0; s < sequences; ++s) {
    seq_id += 1 + below(3);  // ids need not be consecutive
    const int len = 1 + static_cast<int>(below(static_cast<std::uint32_t>(max_len)));
    std::uint32_t pos = below(4);
    for (int i = 0; i < len; ++i) {
      t.tokens.sequence.push_back(seq_id);
      t.tokens.position.push_back(pos);
      pos += 1 + below(2);
      for (std::size_t l = 0; l < t.meta.shape.layers.size(); ++l) {
        for (int j = 0; j < top_k; ++j) {  // partial Fisher-Yates: k distinct ids
          std::size_t r = static_cast<std::size_t>(j) + rng() % (all.size() - static_cast<std::size_t>(j));
          std::swap(all[static_cast<std::size_t>(j)], all[r]);
          t.tokens.experts.push_back(all[static_cast<std::size_t>(j)]);
          if (weights) t.tokens.weights.push_back(w(rng));
        }
      }
    }
  }
  t.meta.token_count = t.tokens.size();
  t.meta.sequence_count = static_cast<std::uint64_t>(sequences);
  return t;
}

void check_same(const MemoryTrace& a, const MemoryTrace& b) {
  CHECK(a.meta.shape.architecture == b.meta.shape.architecture);
  CHECK(a.meta.shape.layers == b.meta.shape.layers);
  CHECK(a.meta.shape.num_experts == b.meta.shape.num_experts);
  CHECK(a.meta.shape.top_k == b.meta.shape.top_k);
  CHECK(a.meta.has_weights == b.meta.has_weights);
  CHECK(a.meta.source == b.meta.source);
  CHECK(a.meta.token_count == b.meta.token_count);
  CHECK(a.meta.sequence_count == b.meta.sequence_count);
  CHECK(a.tokens.sequence == b.tokens.sequence);
  CHECK(a.tokens.position == b.tokens.position);
  CHECK(a.tokens.experts == b.tokens.experts);
  CHECK(a.tokens.weights == b.tokens.weights);  // bit-exact: text keeps the shortest round-trip form
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const common::InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

std::string read_bytes(const fs::path& p) { return moesim::testing::read_text(p); }
void write_bytes(const fs::path& p, const std::string& s) { moesim::testing::write_text(p, s); }

}  // namespace

TEST_CASE("trace format: binary and text round trips keep every token bit for bit") {
  TempDir dir;
  for (bool weights : {true, false}) {
    MemoryTrace t = random_trace(64, {1, 2, 3, 5, 8}, 6, weights, 40, 30, weights ? 1 : 2);
    for (auto enc : {Encoding::kBinary, Encoding::kText}) {
      const fs::path p = dir / (std::string(weights ? "w" : "nw") + (enc == Encoding::kText ? ".txt" : ".mtr"));
      save_trace(t, p.string(), enc, false);
      auto reader = open_trace(p.string());
      CHECK(reader->meta().token_count == t.tokens.size());
      CHECK(reader->meta().sequence_count == 40);
      check_same(read_all(*reader), t);
    }
  }
}

TEST_CASE("trace format: weights survive the text form exactly, including tiny and awkward values") {
  TempDir dir;
  MemoryTrace t = random_trace(8, {0}, 3, true, 1, 1, 3);
  t.tokens.weights = {0.1f, 1e-38f, 3.4028235e38f};
  save_trace(t, (dir / "w.txt").string(), Encoding::kText, false);
  MemoryTrace back = load_trace((dir / "w.txt").string());
  REQUIRE(back.tokens.weights.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(std::memcmp(&back.tokens.weights[i], &t.tokens.weights[i], 4) == 0);
}

TEST_CASE("trace format: binary uses one byte per id up to 256 experts, two beyond, and reads both") {
  TempDir dir;
  MemoryTrace narrow = random_trace(256, {0, 1}, 8, false, 10, 20, 4);
  MemoryTrace wide = random_trace(300, {0, 1}, 8, false, 10, 20, 4);
  REQUIRE(narrow.tokens.size() == wide.tokens.size());
  save_trace(narrow, (dir / "n.mtr").string(), Encoding::kBinary, false);
  save_trace(wide, (dir / "w.mtr").string(), Encoding::kBinary, false);
  const auto ids = narrow.tokens.experts.size();
  CHECK(fs::file_size(dir / "w.mtr") - fs::file_size(dir / "n.mtr") == ids);
  check_same(load_trace((dir / "w.mtr").string()), wide);
  check_same(load_trace((dir / "n.mtr").string()), narrow);
  bool saw_high = false;
  for (auto e : wide.tokens.experts) saw_high = saw_high || e >= 256;
  CHECK(saw_high);
}

TEST_CASE("trace format: a trace larger than one block streams in slices, rewinds, and knows its size up front") {
  TempDir dir;
  // 1 layer, top-1, no weights: 9 bytes per token, so 150k tokens need several blocks.
  MemoryTrace t = random_trace(16, {4}, 1, false, 300, 1200, 5);
  REQUIRE(t.tokens.size() > 2 * kMaxBlockTokens);
  for (auto enc : {Encoding::kBinary, Encoding::kText}) {
    const fs::path p = dir / (enc == Encoding::kText ? "big.txt" : "big.mtr");
    save_trace(t, p.string(), enc, false);
    auto reader = open_trace(p.string());
    CHECK(reader->meta().token_count == t.tokens.size());
    TokenBlock block;
    std::size_t seen = 0;
    bool ok = true;
    while (reader->next(block, 777)) {
      CHECK(block.size() <= 777);
      CHECK(block.size() > 0);
      for (std::size_t i = 0; i < block.size() && ok; ++i)
        ok = block.sequence[i] == t.tokens.sequence[seen + i] && block.experts[i] == t.tokens.experts[seen + i];
      seen += block.size();
    }
    CHECK(ok);
    CHECK(seen == t.tokens.size());
    CHECK_FALSE(reader->next(block));
    reader->rewind();
    check_same(read_all(*reader), t);
  }
}

TEST_CASE("trace format: the memory trace reader and writer follow the same rules") {
  MemoryTrace t = random_trace(32, {0, 1, 2}, 4, true, 5, 7, 6);
  MemoryTrace copy;
  {
    auto reader = read_memory_trace(t);
    auto writer = write_memory_trace(copy, reader->meta());
    TokenBlock b;
    while (reader->next(b, 3)) writer->write(b);
    CHECK(copy.tokens.size() == 0);  // nothing stored before finish()
    writer->finish();
  }
  check_same(copy, t);

  MemoryTrace bad = t;
  bad.tokens.experts[5] = 32;
  CHECK(error_of([&] { read_memory_trace(bad); }).find("expert id 32 is out of range") != std::string::npos);
  MemoryTrace untouched;
  {
    auto w = write_memory_trace(untouched, t.meta);
    w->write(t.tokens);
  }  // destroyed without finish()
  CHECK(untouched.tokens.size() == 0);
}

TEST_CASE("trace format: writers reject tokens that break a rule, naming the token and layer, and leave no file") {
  TempDir dir;
  const MemoryTrace good = random_trace(16, {2, 3}, 2, true, 3, 5, 7);
  struct Case {
    const char* name;
    std::function<void(MemoryTrace&)> spoil;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"id out of range", [](MemoryTrace& t) { t.tokens.experts[2] = 16; }, "layer 3: expert id 16 is out of range"},
      {"duplicate", [](MemoryTrace& t) { t.tokens.experts[1] = t.tokens.experts[0]; }, "appears twice"},
      {"nan weight", [](MemoryTrace& t) { t.tokens.weights[3] = std::numeric_limits<float>::quiet_NaN(); },
       "is not finite"},
      {"inf weight", [](MemoryTrace& t) { t.tokens.weights[0] = std::numeric_limits<float>::infinity(); },
       "is not finite"},
      {"sequence goes back",
       [](MemoryTrace& t) { t.tokens.sequence.back() = 0; }, "sequence ids must not decrease"},
      {"position repeats",
       [](MemoryTrace& t) {
         t.tokens.sequence[1] = t.tokens.sequence[0];
         t.tokens.position[1] = t.tokens.position[0];
       },
       "positions must increase"},
      {"ragged sizes", [](MemoryTrace& t) { t.tokens.experts.pop_back(); }, "block field experts"},
      {"missing weights", [](MemoryTrace& t) { t.tokens.weights.clear(); }, "block field weights"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    MemoryTrace t = good;
    c.spoil(t);
    for (auto enc : {Encoding::kBinary, Encoding::kText}) {
      const fs::path p = dir / (enc == Encoding::kText ? "bad.txt" : "bad.mtr");
      std::string msg = error_of([&] { save_trace(t, p.string(), enc, false); });
      CHECK_MESSAGE(msg.find(c.expect) != std::string::npos, msg);
      CHECK(msg.find(p.string()) != std::string::npos);
      CHECK_FALSE(fs::exists(p));
    }
  }
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 0);  // no temp files left
}

TEST_CASE("trace format: shapes are validated before anything is written") {
  TempDir dir;
  MemoryTrace t = random_trace(16, {2, 3}, 2, false, 1, 2, 8);
  auto spoil_and_check = [&](auto spoil, const char* expect) {
    MemoryTrace b = t;
    spoil(b.meta.shape);
    std::string msg = error_of([&] { save_trace(b, (dir / "s.mtr").string(), Encoding::kBinary, false); });
    CHECK_MESSAGE(msg.find(expect) != std::string::npos, msg);
    CHECK_FALSE(fs::exists(dir / "s.mtr"));
  };
  spoil_and_check([](TraceShape& s) { s.layers = {3, 2}; }, "strictly ascending");
  spoil_and_check([](TraceShape& s) { s.layers.clear(); }, "layers is empty");
  spoil_and_check([](TraceShape& s) { s.top_k = 17; }, "top_k is 17");
  spoil_and_check([](TraceShape& s) { s.num_experts = 70000; }, "num_experts is 70000");
  spoil_and_check([](TraceShape& s) { s.architecture.clear(); }, "architecture is empty");
}

TEST_CASE("trace format: an unfinished writer leaves no file, and an existing file needs overwrite") {
  TempDir dir;
  MemoryTrace t = random_trace(16, {0}, 2, false, 2, 3, 9);
  for (auto enc : {Encoding::kBinary, Encoding::kText}) {
    const fs::path p = dir / "t.out";
    {
      auto w = create_trace_writer(p.string(), t.meta, enc, false);
      w->write(t.tokens);
    }
    CHECK_FALSE(fs::exists(p));
    CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 0);
    save_trace(t, p.string(), enc, false);
    const std::string before = read_bytes(p);
    CHECK_THROWS_AS(save_trace(t, p.string(), enc, false), common::UsageError);
    CHECK(read_bytes(p) == before);
    MemoryTrace other = random_trace(16, {0}, 2, false, 3, 3, 10);
    save_trace(other, p.string(), enc, true);
    check_same(load_trace(p.string()), other);
    fs::remove(p);
  }
}

TEST_CASE("trace format: a flipped byte in a block is a CRC error naming the block and its byte offset") {
  TempDir dir;
  MemoryTrace t = random_trace(16, {4}, 1, false, 300, 1000, 11);
  const fs::path p = dir / "t.mtr";
  save_trace(t, p.string(), Encoding::kBinary, false);
  std::string bytes = read_bytes(p);
  // Find the second block: after the header, JSON and the first block.
  std::uint32_t meta_len = 0, n0 = 0, len0 = 0;
  std::memcpy(&meta_len, bytes.data() + 16, 4);
  const std::size_t b0 = kBinaryHeaderBytes + meta_len;
  std::memcpy(&n0, bytes.data() + b0 + 4, 4);
  std::memcpy(&len0, bytes.data() + b0 + 8, 4);
  const std::size_t b1 = b0 + kBlockHeaderBytes + len0;
  REQUIRE(bytes.compare(b1, 4, "TBLK") == 0);
  std::string corrupt = bytes;
  corrupt[b1 + kBlockHeaderBytes + 100] ^= 0x01;
  write_bytes(p, corrupt);
  auto reader = open_trace(p.string());  // header and trailer are fine
  TokenBlock block;
  REQUIRE(reader->next(block, 1u << 20));  // block 0 is fine
  CHECK(block.size() == n0);
  std::string msg = error_of([&] { reader->next(block, 1u << 20); });
  CHECK_MESSAGE(msg.find("block 1") != std::string::npos, msg);
  CHECK(msg.find("byte offset " + std::to_string(b1)) != std::string::npos);
  CHECK(msg.find("CRC-32 mismatch") != std::string::npos);
  CHECK(msg.find(p.string()) != std::string::npos);
}

TEST_CASE("trace format: truncated, empty, foreign and future-version binary files are refused clearly") {
  TempDir dir;
  MemoryTrace t = random_trace(16, {0, 1}, 2, true, 5, 10, 12);
  const fs::path good = dir / "good.mtr";
  save_trace(t, good.string(), Encoding::kBinary, false);
  const std::string bytes = read_bytes(good);
  const fs::path p = dir / "x.mtr";
  auto msg_for = [&](const std::string& content) {
    write_bytes(p, content);
    return error_of([&] { read_all(*open_trace(p.string())); });
  };
  CHECK(msg_for(bytes.substr(0, bytes.size() - 1)).find("truncated") != std::string::npos);
  CHECK(msg_for(bytes.substr(0, bytes.size() / 2)).find("truncated") != std::string::npos);
  CHECK(msg_for(bytes.substr(0, 10)).find("truncated") != std::string::npos);
  CHECK(msg_for("").find("empty file") != std::string::npos);
  CHECK(msg_for("PK\x03\x04 zip file").find("not a moesim trace") != std::string::npos);
  std::string v2 = bytes;
  v2[8] = 2;
  CHECK(msg_for(v2).find("format version 2, this moesim reads version 1") != std::string::npos);
  std::string meta_flip = bytes;
  meta_flip[kBinaryHeaderBytes + 3] ^= 0x20;
  CHECK(msg_for(meta_flip).find("header CRC-32 mismatch") != std::string::npos);
  std::string trailer_flip = bytes;
  trailer_flip[bytes.size() - 20] ^= 0x01;
  CHECK(msg_for(trailer_flip).find("trailer CRC-32 mismatch") != std::string::npos);
  // A whole block removed (header and trailer intact): the trailer no longer fits the file.
  MemoryTrace big = random_trace(16, {4}, 1, false, 300, 1000, 13);
  save_trace(big, (dir / "big.mtr").string(), Encoding::kBinary, false);
  std::string b = read_bytes(dir / "big.mtr");
  std::uint32_t meta_len = 0, len0 = 0;
  std::memcpy(&meta_len, b.data() + 16, 4);
  const std::size_t b0 = kBinaryHeaderBytes + meta_len;
  std::memcpy(&len0, b.data() + b0 + 8, 4);
  b.erase(b0, kBlockHeaderBytes + len0);
  std::string msg = msg_for(b);
  CHECK_MESSAGE(msg.find("trailer counts (" + std::to_string(big.tokens.size()) + " tokens") != std::string::npos, msg);
  CHECK(msg.find("truncated or corrupt") != std::string::npos);
}

TEST_CASE("trace format: text readers name the line of every mistake") {
  TempDir dir;
  MemoryTrace t = random_trace(8, {1, 2}, 2, true, 2, 3, 14);
  const fs::path good = dir / "good.txt";
  save_trace(t, good.string(), Encoding::kText, false);
  const std::string text = read_bytes(good);
  std::vector<std::string> lines;
  for (std::size_t b = 0; b < text.size();) {
    std::size_t e = text.find('\n', b);
    lines.push_back(text.substr(b, e - b));
    b = e + 1;
  }
  REQUIRE(lines.size() == t.tokens.size() + 3);
  auto join = [](const std::vector<std::string>& ls) {
    std::string s;
    for (const auto& l : ls) s += l + "\n";
    return s;
  };
  const fs::path p = dir / "x.txt";
  auto msg_for = [&](const std::vector<std::string>& ls) {
    write_bytes(p, join(ls));
    return error_of([&] { read_all(*open_trace(p.string())); });
  };
  auto with_line = [&](std::size_t i, const std::string& line) {
    auto ls = lines;
    ls[i] = line;
    return ls;
  };
  const std::string where3 = p.string() + ":3:";
  CHECK(msg_for(with_line(2, "0 0 | 1 9 : 0.5 0.5 | 1 2 : 0.5 0.5")).find(where3 + " layer 1: expert id 2 of 2") !=
        std::string::npos);
  CHECK(msg_for(with_line(2, "0 0 | 1 1 : 0.5 0.5 | 1 2 : 0.5 0.5")).find(where3 + " layer 1: expert 1 appears twice") !=
        std::string::npos);
  CHECK(msg_for(with_line(2, "0 0 | 1 2 : 0.5 x | 1 2 : 0.5 0.5")).find(where3 + " layer 1: gate weight 2 of 2") !=
        std::string::npos);
  CHECK(msg_for(with_line(2, "0 0 | 1 2 : 0.5 0.5 | 1 2 : 0.5 nan")).find(where3 + " layer 2: gate weight nan") !=
        std::string::npos);
  CHECK(msg_for(with_line(2, "0 0 | 1 2 : 0.5 0.5")).find(where3 + " layer 2: expected \"|\"") != std::string::npos);
  CHECK(msg_for(with_line(2, "-1 0 | 1 2 : 0.5 0.5 | 1 2 : 0.5 0.5")).find(where3 + " sequence id") !=
        std::string::npos);
  CHECK(msg_for(with_line(2, "99999999999 0 | 1 2 : 0.5 0.5 | 1 2 : 0.5 0.5")).find("out of range") !=
        std::string::npos);
  CHECK(msg_for(with_line(2, "")).find(where3 + " empty line") != std::string::npos);
  CHECK(msg_for(with_line(0, "#moesim-trace 7")).find(":1: header: format version 7") != std::string::npos);
  CHECK(msg_for(with_line(0, "hello")).find("not a moesim trace") != std::string::npos);
  CHECK(msg_for(with_line(1, "{\"architecture\": 3}")).find(":2: metadata") != std::string::npos);
  CHECK(msg_for(with_line(1, "{not json")).find(":2: metadata: not valid JSON") != std::string::npos);
  auto no_end = lines;
  no_end.pop_back();
  CHECK(msg_for(no_end).find("truncated") != std::string::npos);
  CHECK(msg_for(with_line(lines.size() - 1, "#end 1 1")).find(":4: more tokens than the end line announces (1)") !=
        std::string::npos);
  const std::string one_more = std::to_string(t.tokens.size() + 1);
  CHECK(msg_for(with_line(lines.size() - 1, "#end " + one_more + " 2")).find("end line says " + one_more + " tokens") !=
        std::string::npos);
  CHECK(msg_for(with_line(lines.size() - 1, "#end 99999999999999 2")).find("cannot hold: the end line is corrupt") !=
        std::string::npos);
  auto after_end = lines;
  after_end.push_back("0 0 | 1 2 : 0.5 0.5 | 1 2 : 0.5 0.5");
  CHECK(msg_for(after_end).find("the last line is not the end line") != std::string::npos);
  // Shuffled tokens: sequence order is checked too.
  auto swapped = lines;
  std::swap(swapped[2], swapped[lines.size() - 2]);
  std::string msg = msg_for(swapped);
  CHECK_MESSAGE((msg.find("must not decrease") != std::string::npos || msg.find("must increase") != std::string::npos),
                msg);
}

TEST_CASE("trace format: open_trace detects the encoding from the first bytes, not the file name") {
  TempDir dir;
  MemoryTrace t = random_trace(8, {0}, 1, false, 2, 2, 15);
  save_trace(t, (dir / "looks-binary.mtr").string(), Encoding::kText, false);
  save_trace(t, (dir / "looks-text.txt").string(), Encoding::kBinary, false);
  check_same(load_trace((dir / "looks-binary.mtr").string()), t);
  check_same(load_trace((dir / "looks-text.txt").string()), t);
  CHECK(encoding_for_path("a/b.mtr") == Encoding::kBinary);
  CHECK(encoding_for_path("a/b.txt") == Encoding::kText);
  CHECK(encoding_for_path("a/b.trace") == Encoding::kText);
  CHECK(encoding_for_path("a/b") == Encoding::kBinary);
  CHECK(error_of([&] { open_trace((dir / "missing.mtr").string()); }).find("cannot open") != std::string::npos);
  CHECK(error_of([&] { open_trace(dir.path().string()); }).find("is a folder") != std::string::npos);
}

// Without gate weights and with up to 64 experts the checker judges a token by bit sets: it must find
// exactly what the per-layer check finds, with its message, at 16 and at 64 experts (the whole 64-bit
// range), wherever in the token the bad id sits.
TEST_CASE("trace format: the fast token check finds every out-of-range and repeated id and bad weight, at any expert count") {
  // Up to 64 experts a bit set per layer, beyond that a stamp per expert: both with and without
  // gate weights, each spoiled token found with the same message as the slow check's.
  for (int experts : {16, 64, 65, 256, 1000}) {
    for (bool weights : {false, true}) {
      CAPTURE(experts);
      CAPTURE(weights);
      TraceShape shape;
      shape.layers = {1, 2, 5};
      shape.num_experts = experts;
      shape.top_k = 4;
      const std::size_t per = 3 * 4;
      // 8 tokens in 2 sequences; every layer holds 4 distinct ids in range, spread over the range.
      TokenBlock good;
      for (std::uint32_t t = 0; t < 8; ++t) {
        good.sequence.push_back(t / 4);
        good.position.push_back(t % 4);
        for (std::size_t i = 0; i < per; ++i) {
          const std::size_t group = t * 3 + i / 4, j = i % 4;
          good.experts.push_back(static_cast<std::uint16_t>((group * 3 + j * static_cast<std::size_t>(experts) / 4) % static_cast<std::size_t>(experts)));
          if (weights) good.weights.push_back(0.25f);
        }
      }
      // The highest id once, in the first layer (from token 5 on) where it is not there already.
      for (std::size_t g = 5 * 3, done = 0; g < 8 * 3 && done == 0; ++g) {
        auto* ids = good.experts.data() + g * 4;
        if (std::find(ids, ids + 4, experts - 1) == ids + 4) {
          ids[3] = static_cast<std::uint16_t>(experts - 1);
          done = 1;
        }
      }
      {
        TokenChecker checker(shape, weights);
        CHECK_FALSE(checker.check_block(good));
        CHECK(checker.tokens() == 8);
        // The same block again (the stamps of the first reading are no repeats in the second).
        TokenBlock again = good;
        for (auto& q : again.sequence) q += 2;
        CHECK_FALSE(checker.check_block(again));
        CHECK(checker.tokens() == 16);
      }
      struct Spoil {
        std::size_t token, index;  // which id of which token
        std::uint16_t id;
        std::string expect;  // empty: the id becomes a repeat of the one before it in its layer
      };
      const auto top = static_cast<std::uint16_t>(std::max(64, experts));
      std::vector<Spoil> spoils = {
          {0, 0, static_cast<std::uint16_t>(experts), "layer 1: expert id " + std::to_string(experts) + " is out of range"},
          {3, 11, top, "layer 5: expert id " + std::to_string(top) + " is out of range"},
          {2, 4, 1000, "layer 2: expert id 1000 is out of range"},
          {1, 6, 65535, "layer 2: expert id 65535 is out of range"},
          {6, 5, 0, ""},
          {7, 11, 0, ""},  // the very last id of the block
      };
      if (weights) spoils.push_back({4, 9, 0, "layer 5: gate weight nan is not finite"});
      for (const auto& s : spoils) {
        TokenBlock b = good;
        std::string expect = s.expect;
        const std::size_t at = s.token * per + s.index;
        if (s.expect.empty()) {
          b.experts[at] = b.experts[at - 1];
          expect = "layer " + std::to_string(shape.layers[s.index / 4]) + ": expert " + std::to_string(b.experts[at]) + " appears twice";
        } else if (s.expect.find("weight") != std::string::npos) {
          b.weights[at] = std::numeric_limits<float>::quiet_NaN();
        } else {
          b.experts[at] = s.id;
        }
        TokenChecker checker(shape, weights);
        const auto problem = checker.check_block(b);
        REQUIRE(problem);
        CHECK(problem->token == s.token);
        CHECK_MESSAGE(problem->what.find(expect) != std::string::npos, problem->what);
      }
    }
  }
}

namespace {

// A reader that counts the blocks it reads from its source (the file reads a cache saves).
class CountingReader final : public TraceReader {
 public:
  explicit CountingReader(std::unique_ptr<TraceReader> inner) : inner_(std::move(inner)) {}
  const TraceMeta& meta() const override { return inner_->meta(); }
  bool next(TokenBlock& block, std::size_t max_tokens) override {
    const bool got = inner_->next(block, max_tokens);
    if (got) ++*reads;
    return got;
  }
  void rewind() override { inner_->rewind(); }
  std::shared_ptr<int> reads = std::make_shared<int>(0);

 private:
  std::unique_ptr<TraceReader> inner_;
};

// Every token read through `reader` in `passes` complete readings, in order.
MemoryTrace read_passes(TraceReader& reader, int passes, std::size_t max_tokens) {
  MemoryTrace all;
  TokenBlock block;
  for (int p = 0; p < passes; ++p) {
    while (reader.next(block, max_tokens)) append_tokens(all.tokens, block, 0, block.size(), 8);
    reader.rewind();
  }
  return all;
}

}  // namespace

TEST_CASE("trace format: a cached reader serves the same tokens again without reading the file, within its budget") {
  TempDir dir;
  MemoryTrace t = random_trace(64, {1, 2, 3, 4}, 2, true, 40, 300, 11);
  const fs::path p = dir / "t.mtr";
  save_trace(t, p.string(), Encoding::kBinary, false);
  MemoryTrace three;
  for (int i = 0; i < 3; ++i) append_tokens(three.tokens, t.tokens, 0, t.tokens.size(), 8);

  auto counting = std::make_unique<CountingReader>(open_trace(p.string()));
  const auto reads = counting->reads;
  CachingTraceReader cached(std::move(counting));
  const MemoryTrace got = read_passes(cached, 3, 500);
  CHECK(got.tokens.sequence == three.tokens.sequence);
  CHECK(got.tokens.position == three.tokens.position);
  CHECK(got.tokens.experts == three.tokens.experts);
  CHECK(got.tokens.weights == three.tokens.weights);
  CHECK(cached.cached());
  const int one_pass = static_cast<int>((t.tokens.size() + 499) / 500);
  CHECK(*reads == 2 * one_pass);  // the file was read twice: once alone, once kept

  // Another block size: read from the file again, still the same tokens.
  const MemoryTrace other = read_passes(cached, 1, 123);
  CHECK(other.tokens.experts == t.tokens.experts);
  CHECK(*reads > 2 * one_pass);

  // Over the budget: nothing is kept, every reading goes to the file, the tokens are unchanged.
  auto counting2 = std::make_unique<CountingReader>(open_trace(p.string()));
  const auto reads2 = counting2->reads;
  CachingTraceReader small(std::move(counting2), 1000);
  const MemoryTrace got2 = read_passes(small, 3, 500);
  CHECK(got2.tokens.experts == three.tokens.experts);
  CHECK(got2.tokens.weights == three.tokens.weights);
  CHECK_FALSE(small.cached());
  CHECK(*reads2 == 3 * one_pass);

  // Read once: nothing kept. Rewound before the end while keeping: it keeps from the start again.
  CachingTraceReader once(open_trace(p.string()));
  read_passes(once, 1, 500);
  CHECK_FALSE(once.cached());
  CachingTraceReader early(open_trace(p.string()));
  TokenBlock block;
  REQUIRE(early.next(block, 500));
  early.rewind();
  REQUIRE(early.next(block, 500));
  early.rewind();
  const MemoryTrace got3 = read_passes(early, 3, 500);
  MemoryTrace two;
  for (int i = 0; i < 3; ++i) append_tokens(two.tokens, t.tokens, 0, t.tokens.size(), 8);
  CHECK(got3.tokens.sequence == two.tokens.sequence);
  CHECK(got3.tokens.experts == two.tokens.experts);
  CHECK(early.cached());
}

TEST_CASE("trace format: a binary trace read again is not checked again, unless the file changed under it") {
  TempDir dir;
  MemoryTrace t = random_trace(300, {1, 2}, 4, false, 400, 900, 21);
  MemoryTrace other = t;  // the same blocks, other experts: every id one higher
  for (auto& e : other.tokens.experts) e = static_cast<std::uint16_t>((e + 1) % 300);
  const fs::path p = dir / "t.mtr";
  const fs::path q = dir / "other.mtr";
  save_trace(t, p.string(), Encoding::kBinary, false);
  save_trace(other, q.string(), Encoding::kBinary, false);
  auto reader = open_trace(p.string());
  // Three whole readings give the same tokens (the later ones skip the token checks).
  MemoryTrace three = read_passes(*reader, 3, 1u << 20);
  REQUIRE(three.tokens.size() == 3 * t.tokens.size());
  bool same = true;
  for (std::size_t i = 0; i < three.tokens.size() && same; ++i)
    same = three.tokens.sequence[i] == t.tokens.sequence[i % t.tokens.size()];
  for (std::size_t i = 0; i < three.tokens.experts.size() && same; ++i)
    same = three.tokens.experts[i] == t.tokens.experts[i % t.tokens.experts.size()];
  CHECK(same);
  // The file rewritten in place with other tokens of the same shape: the next reading says so.
  {
    std::ofstream out(p, std::ios::binary | std::ios::in | std::ios::out);
    const std::string bytes = read_bytes(q);
    out.write(bytes.data(), static_cast<std::streamsize>(std::min(bytes.size(), fs::file_size(p))));
  }
  TokenBlock block;
  const std::string msg = error_of([&] {
    while (reader->next(block, 1u << 20)) {
    }
  });
  CHECK_MESSAGE(msg.find("differs from the first reading") != std::string::npos, msg);
  CHECK(msg.find(p.string()) != std::string::npos);
}

TEST_CASE("trace format: json_shown gives dump()'s compact text cut to 60 characters, at any nesting depth") {
  using nlohmann::json;
  for (const json& v : {json::parse(R"({"a":[1,2.5,"x\u00e9\n"],"b":{},"c":[],"d":null,"e":true})"), json::parse("[]"),
                        json::parse(R"([[1,[2,[3]]],{"k":{"l":[-4]}}])"), json("plain"), json(-17)}) {
    const std::string full = v.dump(-1, ' ', false, json::error_handler_t::replace);
    CHECK(json_shown(v) == full);
  }
  const json long_value = json::parse(R"({"records":[[10,11,12,13,14,15],[20,21,22,23,24,25],[30,31,32,33]]})");
  const std::string full = long_value.dump();
  REQUIRE(full.size() > 60);
  CHECK(json_shown(long_value) == full.substr(0, 57) + "...");
  // A million levels deep (json::parse takes it; dump() would recurse once per level and run out of stack).
  std::string deep(1'000'000, '[');
  deep.append(1'000'000, ']');
  CHECK(json_shown(json::parse(deep)) == std::string(57, '[') + "...");
}
