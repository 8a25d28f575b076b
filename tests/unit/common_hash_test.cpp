#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <string>
#include <vector>

#include "common/base64.hpp"
#include "common/error.hpp"
#include "common/hash.hpp"
#include "tests/support/test_support.hpp"
#include "traces/format_binary.hpp"
#include "traces/memory_trace.hpp"

// CRC-32 (zlib) and SHA-256 (libcrypto) as the project calls them: the standard values, pieces and
// seeds, files across read chunks, and the trace reader's block check.
using moesim::common::crc32;
using moesim::common::Sha256;

namespace {

// Feeds `data` in pieces of random sizes (0 included).
std::string digest_in_pieces(const std::string& data, std::mt19937& rng, std::size_t max_piece) {
  Sha256 s;
  std::uniform_int_distribution<std::size_t> piece(0, max_piece);
  std::size_t at = 0;
  while (at < data.size()) {
    const std::size_t n = std::min(piece(rng), data.size() - at);
    s.update(data.data() + at, n);
    at += n;
  }
  return s.hex_digest();
}

std::string random_bytes(std::mt19937& rng, std::size_t n) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(byte(rng));
  return s;
}

// Bit by bit from the polynomial: shares nothing with the library under test.
std::uint32_t crc32_reference(const std::string& data, std::uint32_t seed) {
  std::uint32_t c = ~seed;
  for (unsigned char b : data) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
  }
  return ~c;
}

struct Vector {
  std::string message;
  const char* digest;
};

std::vector<Vector> fips_vectors() {
  return {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
       "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
      {std::string(1000000, 'a'), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
}

// Distinct ids per layer, gate weights, sequences of 1..40 tokens; `tokens` tokens in all.
moesim::traces::MemoryTrace weighted_trace(int num_experts, std::size_t tokens, unsigned seed) {
  moesim::traces::MemoryTrace t;
  t.meta.shape = {"test-arch", {0, 1}, num_experts, 2};
  t.meta.has_weights = true;
  t.meta.source = "hash test";
  std::mt19937 rng(seed);
  std::uint32_t seq = 0, pos = 0, left = 0;
  std::uint64_t sequences = 0;
  while (t.tokens.size() < tokens) {
    if (left == 0) {
      ++seq;
      pos = 0;
      left = 1 + static_cast<std::uint32_t>(rng() % 40);
      ++sequences;
    }
    t.tokens.sequence.push_back(seq);
    t.tokens.position.push_back(pos++);
    --left;
    for (int l = 0; l < 2; ++l) {
      const auto a = static_cast<std::uint16_t>(rng() % static_cast<unsigned>(num_experts));
      const auto b = static_cast<std::uint16_t>((a + 1 + rng() % static_cast<unsigned>(num_experts - 1)) %
                                                static_cast<unsigned>(num_experts));
      t.tokens.experts.insert(t.tokens.experts.end(), {a, b});
      t.tokens.weights.insert(t.tokens.weights.end(), {0.75f, 0.25f});
    }
  }
  t.meta.token_count = t.tokens.size();
  t.meta.sequence_count = sequences;
  return t;
}

std::uint32_t get_u32(const std::string& bytes, std::size_t at) {
  std::uint32_t v = 0;
  std::memcpy(&v, bytes.data() + at, 4);
  return v;
}

}  // namespace

TEST_CASE("hash: SHA-256 matches the FIPS 180-2 vectors, whole and in pieces") {
  std::mt19937 rng(7);
  for (const auto& v : fips_vectors()) {
    CAPTURE(v.message.size());
    CHECK(moesim::common::sha256_hex(v.message) == v.digest);
    CHECK(digest_in_pieces(v.message, rng, 130) == v.digest);
  }
  // Pieces never change a digest, whatever their sizes.
  for (std::size_t n : {std::size_t{63}, std::size_t{64}, std::size_t{65}, std::size_t{4099}}) {
    CAPTURE(n);
    const std::string data = random_bytes(rng, n);
    CHECK(digest_in_pieces(data, rng, 70) == moesim::common::sha256_hex(data));
  }
}

TEST_CASE("hash: sha256_file hashes files across its read chunks and names an unreadable file") {
  moesim::testing::TempDir dir;
  std::mt19937 rng(11);
  for (std::size_t n : {std::size_t{0}, std::size_t{1} << 20, (std::size_t{5} << 19) + 17}) {
    CAPTURE(n);
    const std::string data = random_bytes(rng, n);
    const auto path = dir / ("f" + std::to_string(n));
    moesim::testing::write_text(path, data);
    CHECK(moesim::common::sha256_file(path.string()) == moesim::common::sha256_hex(data));
  }
  const std::string missing = (dir / "missing.bin").string();
  const std::string error = moesim::testing::error_of([&] { moesim::common::sha256_file(missing); });
  CHECK(error.starts_with(missing + ": cannot open for reading"));
}

TEST_CASE("hash: CRC-32 matches the zlib values and a bitwise reference, with seeds and splits") {
  CHECK(crc32("123456789", 9) == 0xCBF43926u);
  CHECK(crc32("", 0) == 0u);
  CHECK(crc32("The quick brown fox jumps over the lazy dog", 43) == 0x414FA339u);
  CHECK(crc32("456789", 6, crc32("123", 3)) == 0xCBF43926u);
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::uint32_t> any;
  for (std::size_t n = 0; n <= 100; ++n) {
    CAPTURE(n);
    // A misaligned start as well: the words are assembled from bytes.
    const std::string buffer = random_bytes(rng, n + 7);
    const std::size_t offset = n % 8;
    const std::string data = buffer.substr(offset, n);
    const std::uint32_t seed = (n % 4 == 0) ? 0u : any(rng);
    const std::uint32_t want = crc32_reference(data, seed);
    CHECK(crc32(buffer.data() + offset, n, seed) == want);
    const std::size_t split = std::uniform_int_distribution<std::size_t>(0, n)(rng);
    const std::uint32_t first = crc32(data.data(), split, seed);
    CHECK(first == crc32_reference(data.substr(0, split), seed));
    CHECK(crc32(data.data() + split, n - split, first) == want);
  }
  const std::string big = random_bytes(rng, 100000);
  CHECK(crc32(big.data(), big.size(), 0x12345678u) == crc32_reference(big, 0x12345678u));
}

TEST_CASE("hash: the binary reader's block CRC, taken field by field, catches a flip in every field") {
  using namespace moesim::traces;
  moesim::testing::TempDir dir;
  for (int experts : {16, 300}) {  // one-byte and two-byte expert ids
    CAPTURE(experts);
    const MemoryTrace t = weighted_trace(experts, 80000, static_cast<unsigned>(experts));
    const std::string path = (dir / ("t" + std::to_string(experts) + ".mtr")).string();
    save_trace(t, path, Encoding::kBinary, true);
    const MemoryTrace back = load_trace(path);
    CHECK(back.tokens.sequence == t.tokens.sequence);
    CHECK(back.tokens.position == t.tokens.position);
    CHECK(back.tokens.experts == t.tokens.experts);
    CHECK(back.tokens.weights == t.tokens.weights);

    const std::string bytes = moesim::testing::read_text(path);
    const std::size_t b0 = kBinaryHeaderBytes + get_u32(bytes, 16);
    const std::size_t b1 = b0 + kBlockHeaderBytes + get_u32(bytes, b0 + 8);
    REQUIRE(bytes.compare(b1, 4, "TBLK") == 0);
    const std::size_t n1 = get_u32(bytes, b1 + 4), len1 = get_u32(bytes, b1 + 8);
    const std::size_t ids = n1 * 4, id_bytes = experts > 256 ? 2 : 1;
    REQUIRE(len1 == 8 * n1 + ids * id_bytes + ids * 4);
    // The first byte of each field of block 1's payload: sequence, position, expert ids, weights.
    for (std::size_t field : {std::size_t{0}, 4 * n1, 8 * n1, 8 * n1 + ids * id_bytes, len1 - 1}) {
      CAPTURE(field);
      std::string corrupt = bytes;
      corrupt[b1 + kBlockHeaderBytes + field] ^= 0x10;
      moesim::testing::write_text(path, corrupt);
      char computed[16];
      std::snprintf(computed, sizeof computed, "0x%08x",
                    crc32(corrupt.data() + b1 + kBlockHeaderBytes, len1));  // the whole payload at once
      auto reader = open_trace(path);
      TokenBlock block;
      REQUIRE(reader->next(block, 1u << 20));
      const std::string msg = moesim::testing::error_of([&] { reader->next(block, 1u << 20); });
      CHECK_MESSAGE(msg.find("block 1 (payload bytes") != std::string::npos, msg);
      CHECK_MESSAGE(msg.find(std::string("computed ") + computed) != std::string::npos, msg);
      // Asked again, the reader reads the bad block again rather than handing it out.
      CHECK(moesim::testing::error_of([&] { reader->next(block, 1u << 20); }) == msg);
    }
  }
}

// Base64 (common/base64, libcrypto): RFC 4648's test vectors both ways, random round trips of every
// padding length, and the strict decoder's refusals with the offset of the first bad character.
TEST_CASE("base64: RFC 4648 vectors, round trips, strict refusals") {
  using moesim::common::base64_decode;
  using moesim::common::base64_encode;
  const std::vector<std::pair<std::string, std::string>> vectors = {
      {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"}};
  for (const auto& vector : vectors) {
    const std::string& plain = vector.first;  // not a structured binding: CAPTURE's lambda takes it
    const std::string& coded = vector.second;
    CAPTURE(plain);
    const std::vector<unsigned char> bytes(plain.begin(), plain.end());
    CHECK(base64_encode(bytes) == coded);
    CHECK(base64_decode(coded, "t") == bytes);
  }
  std::mt19937 rng(5);
  for (std::size_t n = 0; n < 40; ++n) {
    std::vector<unsigned char> bytes(n);
    for (auto& b : bytes) b = static_cast<unsigned char>(rng() & 0xFF);
    CHECK(base64_decode(base64_encode(bytes), "t") == bytes);
  }
  auto error_of = [](const std::string& text) {
    try {
      base64_decode(text, "dump.jsonl:3: routed_experts");
    } catch (const moesim::common::InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error_of("Zm9") == "dump.jsonl:3: routed_experts: expected base64 text (a multiple of 4 characters), got 3 "
                           "characters");
  CHECK(error_of("Zm9v Zg=") == "dump.jsonl:3: routed_experts: expected base64 text, found a bad character at offset 4");
  CHECK(error_of("Zg==Zm9v").find("at offset 2") != std::string::npos);  // padding only at the end
  CHECK(error_of("Z===").find("at offset 1") != std::string::npos);      // at most two '='
  CHECK(error_of("Zm=v").find("at offset 2") != std::string::npos);
  CHECK(error_of("Zm9-").find("at offset 3") != std::string::npos);      // the URL alphabet is not accepted
}
