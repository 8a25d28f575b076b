#include "common/hash.hpp"

#include <openssl/evp.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/error.hpp"

namespace moesim::common {

std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t seed) {
  // zlib returns its initial value, not `seed`, for a null buffer: an empty input changes nothing.
  if (size == 0) return seed;
  return static_cast<std::uint32_t>(crc32_z(seed, static_cast<const Bytef*>(data), size));
}

namespace {

EVP_MD_CTX* context(void* p) { return static_cast<EVP_MD_CTX*>(p); }

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(context(ctx_), EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(context(ctx_));
    throw RunError("SHA-256: libcrypto could not start a digest (out of memory?)");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(context(ctx_)); }

void Sha256::update(const void* data, std::size_t size) {
  if (size > 0 && EVP_DigestUpdate(context(ctx_), data, size) != 1)
    throw RunError("SHA-256: libcrypto failed to hash " + std::to_string(size) + " bytes");
}

std::string Sha256::hex_digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(context(ctx_), md, &len) != 1 || len != 32)
    throw RunError("SHA-256: libcrypto failed to finish the digest");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 0xf];
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
