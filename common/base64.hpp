// Standard base64 (RFC 4648, '+' '/' alphabet, '=' padding), by OpenSSL's libcrypto (EVP_EncodeBlock,
// EVP_DecodeBlock). Used by the fitted-model files (traces/fit.cpp) and the serving-engine importers
// (SGLang's routed experts, traces/import_sglang.cpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moesim::common {

std::string base64_encode(const std::vector<unsigned char>& bytes);

// Strict: the length is a multiple of 4, every character is of the alphabet, '=' only as the last one
// or two. Anything else is an InputError naming `where` and the offset of the first bad character
// (libcrypto alone would skip whitespace and hide the padding, hence the check before it).
std::vector<unsigned char> base64_decode(std::string_view text, const std::string& where);

}  // namespace moesim::common
