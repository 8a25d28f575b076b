// The binary trace encoding (.mtr, traces/FORMAT.md "Binary encoding"): a header with magic, version,
// flags and a JSON metadata block under a CRC-32; blocks of tokens, each with its own CRC-32; a
// trailer with the token, sequence and block counts. The reader streams one block at a time and
// reports corruption and truncation with the block number and byte offset.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "traces/trace.hpp"

namespace moesim::traces {

inline constexpr std::array<unsigned char, 8> kBinaryMagic = {0x89, 'M', 'T', 'R', '\r', '\n', 0x1a, '\n'};
inline constexpr std::size_t kBinaryHeaderBytes = 24;   // before the metadata JSON
inline constexpr std::size_t kBlockHeaderBytes = 16;
inline constexpr std::size_t kTrailerBytes = 32;
inline constexpr std::uint32_t kFlagWeights = 1u << 0;  // gate weights present
inline constexpr std::uint32_t kFlagWideIds = 1u << 1;  // expert ids stored as uint16 (num_experts > 256)
inline constexpr std::size_t kMaxMetadataBytes = std::size_t{1} << 24;
// A writer closes a block once its payload reaches this size (or kMaxBlockTokens tokens).
inline constexpr std::size_t kTargetBlockBytes = std::size_t{1} << 20;
inline constexpr std::size_t kMaxBlockTokens = 65536;

bool has_binary_magic(const void* data, std::size_t size);

std::unique_ptr<TraceReader> open_binary_trace(const std::string& path);
std::unique_ptr<TraceWriter> create_binary_writer(const std::string& path, const TraceMeta& meta, bool overwrite);

}  // namespace moesim::traces
