#include "common/base64.hpp"

#include <openssl/evp.h>

#include <cstddef>
#include <limits>

#include "common/error.hpp"

namespace moesim::common {

namespace {

bool in_alphabet(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
}

// EVP_*Block take an int length: larger inputs go in pieces of whole groups (3 bytes in, 4 characters out).
constexpr std::size_t kChunkGroups = (std::numeric_limits<int>::max() / 4) / 4;

}  // namespace

std::string base64_encode(const std::vector<unsigned char>& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t at = 0; at < bytes.size(); at += kChunkGroups * 3) {
    const std::size_t n = std::min(bytes.size() - at, kChunkGroups * 3);
    std::string piece((n + 2) / 3 * 4 + 1, '\0');  // EVP_EncodeBlock writes a terminating NUL
    const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(piece.data()), bytes.data() + at,
                                        static_cast<int>(n));
    piece.resize(static_cast<std::size_t>(written));
    out += piece;
  }
  return out;
}

std::vector<unsigned char> base64_decode(std::string_view text, const std::string& where) {
  if (text.size() % 4 != 0)
    throw InputError(where + ": expected base64 text (a multiple of 4 characters), got " + std::to_string(text.size()) +
                     " characters");
  std::size_t pad = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool padding = c == '=' && i + 2 >= text.size() && (i + 1 == text.size() || text[i + 1] == '=');
    if (padding) {
      ++pad;
      continue;
    }
    if (!in_alphabet(c) || pad > 0)
      throw InputError(where + ": expected base64 text, found a bad character at offset " + std::to_string(i));
  }
  std::vector<unsigned char> out(text.size() / 4 * 3);
  std::size_t filled = 0;
  for (std::size_t at = 0; at < text.size(); at += kChunkGroups * 4) {
    const std::size_t n = std::min(text.size() - at, kChunkGroups * 4);
    const int got = EVP_DecodeBlock(out.data() + filled, reinterpret_cast<const unsigned char*>(text.data() + at),
                                    static_cast<int>(n));
    if (got < 0) throw InputError(where + ": expected base64 text, which libcrypto could not decode");
    filled += static_cast<std::size_t>(got);
  }
  out.resize(filled - pad);  // EVP_DecodeBlock counts the padded group as 3 bytes
  return out;
}

}  // namespace moesim::common
