// The routing-trace data model and the reader/writer interface behind both encodings (text and
// binary, see traces/FORMAT.md). A trace holds, for every token and every MoE layer, the top-k expert
// ids (and gate weights when known), with the token's sequence id and position. Readers stream: they
// hand out blocks of consecutive tokens, so memory grows with one block, never with the trace.
// Readers throw common::InputError naming the file and the line (text) or byte offset (binary).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moesim::traces {

inline constexpr int kFormatVersion = 1;
inline constexpr int kMaxExperts = 65535;  // expert ids are stored as uint16
inline constexpr int kMaxTopK = 64;

// What a trace is about: the routing shape every token follows.
struct TraceShape {
  std::string architecture;  // architecture name, e.g. "deepseek-v2-lite"
  std::vector<int> layers;   // decoder-layer index of each MoE layer in the trace, ascending
  int num_experts = 0;       // routed experts per layer; ids are 0 .. num_experts-1
  int top_k = 0;             // experts per token per layer (distinct)
};

struct TraceMeta {
  TraceShape shape;
  bool has_weights = false;      // gate weights present
  std::string source;            // provenance, free text (importer and input, or generator and seed)
  std::uint64_t token_count = 0;     // tokens in the whole trace (known to every reader up front)
  std::uint64_t sequence_count = 0;  // distinct sequences
};

// Consecutive tokens of a trace. experts and weights are laid out [token][layer][k].
struct TokenBlock {
  std::vector<std::uint32_t> sequence;  // per token: sequence id
  std::vector<std::uint32_t> position;  // per token: position within its sequence
  std::vector<std::uint16_t> experts;   // tokens * layers * top_k
  std::vector<float> weights;           // same size as experts when has_weights, else empty

  std::size_t size() const { return sequence.size(); }
  void clear() {
    sequence.clear();
    position.clear();
    experts.clear();
    weights.clear();
  }
};

// Streams a trace. next() replaces `block` with the next tokens (at most `max_tokens`) and returns
// false once the trace is exhausted. rewind() starts again from the first token.
class TraceReader {
 public:
  virtual ~TraceReader() = default;
  virtual const TraceMeta& meta() const = 0;
  virtual bool next(TokenBlock& block, std::size_t max_tokens = 4096) = 0;
  virtual void rewind() = 0;
};

// Writes a trace. write() appends tokens (validated against the meta's shape); finish() completes the
// file and renames it into place. A writer destroyed without finish() leaves no file behind.
class TraceWriter {
 public:
  virtual ~TraceWriter() = default;
  virtual void write(const TokenBlock& block) = 0;
  virtual void finish() = 0;
};

enum class Encoding { kBinary, kText };

// Opens either encoding (detected from the first bytes).
std::unique_ptr<TraceReader> open_trace(const std::string& path);
// `meta.token_count` and `sequence_count` are filled in by the writer from what was written.
// Refuses to replace an existing file unless `overwrite`.
std::unique_ptr<TraceWriter> create_trace_writer(const std::string& path, const TraceMeta& meta, Encoding encoding,
                                                 bool overwrite);
// Encoding from the file name: ".mtr" binary, ".txt"/".trace" text; anything else binary.
Encoding encoding_for_path(const std::string& path);

}  // namespace moesim::traces
