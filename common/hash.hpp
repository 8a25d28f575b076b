// Checksums: CRC-32 (IEEE, as zlib) for trace blocks, SHA-256 for the input hashes in reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moesim::common {

std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t seed = 0);

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  std::string hex_digest();  // finishes; call once
 private:
  void block(const unsigned char* p);
  std::uint32_t h_[8];
  unsigned char buf_[64];
  std::size_t buf_len_ = 0;
  std::uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);
std::string sha256_file(const std::string& path);  // throws InputError if unreadable

}  // namespace moesim::common
