// Checksums: CRC-32 (IEEE) for trace blocks, from zlib's crc32_z; SHA-256 for the input hashes in
// reports, from OpenSSL's libcrypto (EVP, which picks the CPU's SHA instructions where it has them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moesim::common {

// zlib's crc32(): crc32(b, nb, crc32(a, na, seed)) == crc32(a + b, na + nb, seed); an empty input
// returns `seed`.
std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t seed = 0);

// Incremental SHA-256 (libcrypto EVP). Not copyable.
class Sha256 {
 public:
  Sha256();  // RunError if libcrypto cannot start a digest
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  ~Sha256();
  void update(const void* data, std::size_t size);
  std::string hex_digest();  // finishes; call once

 private:
  void* ctx_;  // EVP_MD_CTX, kept out of this header
};

std::string sha256_hex(std::string_view data);
std::string sha256_file(const std::string& path);  // throws InputError if unreadable

}  // namespace moesim::common
