// Rules every trace obeys, shared by both encodings, the memory trace and the importers
// (traces/FORMAT.md, "Rules"): shape limits, per-token routing checks (ids in range, no duplicate
// expert in one token's top-k at one layer, finite weights) and sequence order (sequence ids never
// decrease; positions strictly increase within a sequence). Checkers return a problem description;
// the caller adds the location (file and line, byte offset or record) and throws.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "traces/trace.hpp"

namespace moesim::traces {

// Little-endian fields of the binary encodings (the .mtr and .mlt formats; both assert a
// little-endian host), and a CRC or magic as "0x%08x" for messages.
inline void put_u32(unsigned char* p, std::uint32_t v) { std::memcpy(p, &v, 4); }
inline void put_u64(unsigned char* p, std::uint64_t v) { std::memcpy(p, &v, 8); }
inline std::uint32_t get_u32(const unsigned char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline std::uint64_t get_u64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
std::string hex32(std::uint32_t v);

// Empty when `shape` is usable, else what is wrong ("top_k is 9, expected 1..8 (at most num_experts)").
std::string shape_problem(const TraceShape& shape);
// Throws common::InputError "`where`: problem" when the shape is not usable.
void validate_shape(const TraceShape& shape, std::string_view where);

// The metadata object stored in both encodings (FORMAT.md, "Metadata"); token and sequence counts
// live elsewhere (binary trailer, text end line) since a streaming writer learns them last.
nlohmann::json meta_to_json(const TraceMeta& meta);
// A trace shape's fields in a header: architecture, layers, num_experts, top_k.
void shape_to_json(const TraceShape& shape, nlohmann::json& j);
// Parses and validates; errors are InputError "`where`: ...". Counts are left at zero.
TraceMeta meta_from_json(const nlohmann::json& json, std::string_view where);

// Number of expert ids one token carries: layers * top_k.
inline std::size_t ids_per_token(const TraceShape& shape) {
  return shape.layers.size() * static_cast<std::size_t>(shape.top_k);
}

// Checks tokens against a shape in trace order. One checker follows one stream of tokens: it keeps
// the last sequence id and position to check order and counts tokens and sequences.
class TokenChecker {
 public:
  TokenChecker(const TraceShape& shape, bool has_weights);

  // The k ids (and k weights, or nullptr) of one token at one layer. Empty when fine.
  std::string layer_problem(const std::uint16_t* ids, const float* weights);
  // Sequence order of the next token. Empty when fine; on success the token is counted.
  std::string order_problem(std::uint32_t sequence, std::uint32_t position);

  // A problem found in a block: the index of the first bad token in the block and what is wrong.
  struct BlockProblem {
    std::size_t token = 0;
    std::string what;
  };
  // Checks sizes, then every token of `block` (routing and order) following the tokens seen so far.
  std::optional<BlockProblem> check_block(const TokenBlock& block);

  std::uint64_t tokens() const { return tokens_; }
  std::uint64_t sequences() const { return sequences_; }
  void reset();

 private:
  TraceShape shape_;
  bool has_weights_;
  std::vector<std::uint32_t> stamp_;  // per expert: last generation it was seen (duplicate check)
  std::uint32_t generation_ = 0;
  bool any_ = false;
  std::uint32_t last_sequence_ = 0;
  std::uint32_t last_position_ = 0;
  std::uint64_t tokens_ = 0;
  std::uint64_t sequences_ = 0;
};

// "token 17 (sequence 3, position 5)" for messages.
std::string describe_token(std::uint64_t index, std::uint32_t sequence, std::uint32_t position);

// A JSON value as shown in messages: its compact dump, cut to 60 characters.
std::string json_shown(const nlohmann::json& value);

// Shortest text that reads back as the same float (std::to_chars).
void append_float(std::string& out, float value);
void append_uint(std::string& out, std::uint64_t value);

}  // namespace moesim::traces
