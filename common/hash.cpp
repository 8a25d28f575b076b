#include "common/hash.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/error.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define MOESIM_SHA_NI 1
#endif

namespace moesim::common {

namespace {

// Slicing-by-8: table k maps a byte to its CRC contribution when k more zero bytes follow it.
using CrcTables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr CrcTables make_crc_tables() {
  CrcTables t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[0][i] = c;
  }
  for (std::size_t k = 1; k < 8; ++k)
    for (std::size_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xffu];
  return t;
}
constexpr CrcTables kCrc = make_crc_tables();

// Byte by byte, so the result does not depend on the host's byte order; compilers fuse it into one load.
inline std::uint32_t load_le32(const unsigned char* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) | (std::uint32_t{p[3]} << 24);
}

alignas(16) constexpr std::uint32_t kSha256K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

inline std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

#ifdef MOESIM_SHA_NI

// The SHA instructions keep the state as two vectors, ABEF and CDGH (lane 3 first), and take the
// message words with their round constants added, two rounds per sha256rnds2.
__attribute__((target("sha,sse4.1,ssse3"))) void sha256_compress_sha_ni(std::uint32_t* h, const unsigned char* p,
                                                                        std::size_t blocks) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
  __m128i dcba = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h));
  __m128i hgfe = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 4));
  const __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
  const __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
  __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
  for (; blocks > 0; --blocks, p += 64) {
    const __m128i abef_in = abef, cdgh_in = cdgh;
    // w0..w3: message words 4r..4r+15 for the group of four rounds r.
    __m128i w0 = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), byte_swap);
    __m128i w1 = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)), byte_swap);
    __m128i w2 = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32)), byte_swap);
    __m128i w3 = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 48)), byte_swap);
    for (int r = 0; r < 16; ++r) {
      __m128i wk = _mm_add_epi32(w0, _mm_load_si128(reinterpret_cast<const __m128i*>(kSha256K + 4 * r)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
      wk = _mm_shuffle_epi32(wk, 0x0E);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, wk);
      // W[t] = W[t-16] + s0(W[t-15]) + W[t-7] + s1(W[t-2]) for the four words of group r + 4.
      const __m128i next =
          _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(w0, w1), _mm_alignr_epi8(w3, w2, 4)), w3);
      w0 = w1;
      w1 = w2;
      w2 = w3;
      w3 = next;
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  dcba = _mm_blend_epi16(feba, dchg, 0xF0);
  hgfe = _mm_alignr_epi8(dchg, feba, 8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h), dcba);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h + 4), hgfe);
}

bool cpu_has_sha_ni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
  const bool sse41 = (c & (1u << 19)) != 0, ssse3 = (c & (1u << 9)) != 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  return sse41 && ssse3 && (b & (1u << 29)) != 0;
}

#endif

detail::Sha256Compress best_compress() {
  static const detail::Sha256Compress best = [] {
    const detail::Sha256Compress hw = detail::sha256_compress_hardware();
    return hw != nullptr ? hw : &detail::sha256_compress_portable;
  }();
  return best;
}

}  // namespace

std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~seed;
  for (; size >= 8; size -= 8, p += 8) {
    const std::uint32_t lo = c ^ load_le32(p);
    const std::uint32_t hi = load_le32(p + 4);
    c = kCrc[7][lo & 0xffu] ^ kCrc[6][(lo >> 8) & 0xffu] ^ kCrc[5][(lo >> 16) & 0xffu] ^ kCrc[4][lo >> 24] ^
        kCrc[3][hi & 0xffu] ^ kCrc[2][(hi >> 8) & 0xffu] ^ kCrc[1][(hi >> 16) & 0xffu] ^ kCrc[0][hi >> 24];
  }
  for (; size > 0; --size, ++p) c = kCrc[0][(c ^ *p) & 0xffu] ^ (c >> 8);
  return ~c;
}

namespace detail {

void sha256_compress_portable(std::uint32_t* hs, const unsigned char* p, std::size_t blocks) {
  for (; blocks > 0; --blocks, p += 64) {
    std::uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = (std::uint32_t{p[4 * i]} << 24) | (std::uint32_t{p[4 * i + 1]} << 16) |
             (std::uint32_t{p[4 * i + 2]} << 8) | std::uint32_t{p[4 * i + 3]};
    for (int i = 16; i < 64; ++i) {
      const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = hs[0], b = hs[1], c = hs[2], d = hs[3], e = hs[4], f = hs[5], g = hs[6], h = hs[7];
    for (int i = 0; i < 64; ++i) {
      const std::uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      const std::uint32_t ch = (e & f) ^ (~e & g);
      const std::uint32_t t1 = h + s1 + ch + kSha256K[i] + w[i];
      const std::uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      const std::uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
      const std::uint32_t t2 = s0 + maj;
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    hs[0] += a;
    hs[1] += b;
    hs[2] += c;
    hs[3] += d;
    hs[4] += e;
    hs[5] += f;
    hs[6] += g;
    hs[7] += h;
  }
}

Sha256Compress sha256_compress_hardware() {
#ifdef MOESIM_SHA_NI
  static const bool available = cpu_has_sha_ni();
  if (available) return &sha256_compress_sha_ni;
#endif
  return nullptr;
}

}  // namespace detail

Sha256::Sha256() : Sha256(best_compress()) {}

Sha256::Sha256(detail::Sha256Compress compress)
    : compress_(compress),
      h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19},
      buf_{} {
  if (compress_ == nullptr) throw RunError("Sha256: no compression function given (the hardware path is unavailable?)");
}

void Sha256::update(const void* data, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += size;
  if (buf_len_ > 0) {
    const std::size_t take = std::min(size, sizeof buf_ - buf_len_);
    std::memcpy(buf_ + buf_len_, p, take);
    buf_len_ += take;
    p += take;
    size -= take;
    if (buf_len_ < sizeof buf_) return;
    compress_(h_, buf_, 1);
    buf_len_ = 0;
  }
  // Whole blocks straight from the caller's bytes; only a tail waits in buf_.
  const std::size_t blocks = size / 64;
  if (blocks > 0) compress_(h_, p, blocks);
  p += blocks * 64;
  size -= blocks * 64;
  std::memcpy(buf_, p, size);
  buf_len_ = size;
}

std::string Sha256::hex_digest() {
  const std::uint64_t bits = total_ * 8;
  // Padding: 0x80, zeros up to 56 mod 64, then the bit length big-endian (one or two blocks).
  unsigned char tail[128] = {};
  std::memcpy(tail, buf_, buf_len_);
  tail[buf_len_] = 0x80;
  const std::size_t len = buf_len_ < 56 ? 64 : 128;
  for (std::size_t i = 0; i < 8; ++i) tail[len - 1 - i] = static_cast<unsigned char>(bits >> (8 * i));
  compress_(h_, tail, len / 64);
  buf_len_ = 0;
  std::string out;
  char hex[9];
  for (std::uint32_t v : h_) {
    std::snprintf(hex, sizeof hex, "%08x", v);
    out += hex;
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  Sha256 s;
  s.update(data.data(), data.size());
  return s.hex_digest();
}

std::string sha256_file(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (f == nullptr) throw InputError(path + ": cannot open for reading: " + std::strerror(errno));
  // Large reads: the file is hashed once, start to end, and big freads bypass stdio's own buffer.
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  const auto buf = std::make_unique<unsigned char[]>(kChunk);
  Sha256 s;
  for (;;) {
    const std::size_t got = std::fread(buf.get(), 1, kChunk, f.get());
    s.update(buf.get(), got);
    if (got < kChunk) break;
  }
  if (std::ferror(f.get()) != 0) throw InputError(path + ": read error");
  return s.hex_digest();
}

}  // namespace moesim::common
