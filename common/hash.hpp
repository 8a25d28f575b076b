// Checksums: CRC-32 (IEEE, as zlib) for trace blocks, SHA-256 for the input hashes in reports.
// Both are the standard functions bit for bit; the fast paths (slicing-by-8 CRC, the x86 SHA
// instructions, picked at run time by CPUID) change the speed, never a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moesim::common {

// crc32(b, nb, crc32(a, na, seed)) == crc32(a + b, na + nb, seed), as zlib's crc32().
std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t seed = 0);

namespace detail {
// Compresses `blocks` 64-byte blocks at `p` into the state `h`.
using Sha256Compress = void (*)(std::uint32_t* h, const unsigned char* p, std::size_t blocks);
void sha256_compress_portable(std::uint32_t* h, const unsigned char* p, std::size_t blocks);
// The SHA-NI path, or nullptr where the build or the CPU lacks it. Tests pin a path with these.
Sha256Compress sha256_compress_hardware();
}  // namespace detail

class Sha256 {
 public:
  Sha256();  // the fastest path this CPU has
  explicit Sha256(detail::Sha256Compress compress);
  void update(const void* data, std::size_t size);
  std::string hex_digest();  // finishes; call once
 private:
  detail::Sha256Compress compress_;
  std::uint32_t h_[8];
  unsigned char buf_[64];
  std::size_t buf_len_ = 0;
  std::uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);
std::string sha256_file(const std::string& path);  // throws InputError if unreadable

}  // namespace moesim::common
