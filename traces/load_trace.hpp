// Load-only traces (traces/FORMAT.md, "Load-only traces"): per iteration (one step of a serving or
// training run), the number of tokens each routed expert of each MoE layer received, without the
// per-token routes. Counts are uint32, laid out [layer][expert] per iteration. Every iteration is
// top-k consistent: at every layer the counts sum to top_k x the iteration's tokens (the same token
// count at every layer, at least one token) and no expert gets more than the iteration's tokens.
// Writers and readers check it and throw common::InputError naming the file, iteration and layer.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "traces/trace.hpp"

namespace moesim::traces {

inline constexpr int kLoadFormatVersion = 1;
inline constexpr std::array<unsigned char, 8> kLoadMagic = {'M', 'O', 'E', 'S', 'I', 'M', 'L', 'T'};

struct LoadTraceMeta {
  TraceShape shape;                  // MoE layers, experts, top_k
  std::string source;                // provenance, free text (importer and input)
  std::uint64_t iterations = 0;      // iterations in the file (known to every reader up front)
  std::uint64_t total_tokens = 0;    // tokens summed over the iterations
};

// Whether the file starts with the load-only magic (false for a missing or short file).
bool is_load_trace(const std::string& path);

// Streams a load-only trace. next() replaces `counts` with the next iteration's counts, [layer][expert]
// (layers x experts values), and returns false once the trace is exhausted. rewind() starts again
// from the first iteration.
class LoadTraceReader {
 public:
  virtual ~LoadTraceReader() = default;
  virtual const LoadTraceMeta& meta() const = 0;
  virtual bool next(std::vector<std::uint32_t>& counts) = 0;
  virtual void rewind() = 0;
};

// Writes a load-only trace: write() appends one iteration (checked), finish() completes the file and
// renames it into place. A writer destroyed without finish() leaves no file behind.
class LoadTraceWriter {
 public:
  virtual ~LoadTraceWriter() = default;
  virtual void write(const std::vector<std::uint32_t>& counts) = 0;
  virtual void finish() = 0;
};

std::unique_ptr<LoadTraceReader> open_load_trace(const std::string& path);
// `meta.iterations` and `total_tokens` are filled in by the writer from what was written. Refuses to
// replace an existing file unless `overwrite`; finish() refuses a trace of no iterations.
std::unique_ptr<LoadTraceWriter> create_load_trace_writer(const std::string& path, const LoadTraceMeta& meta,
                                                          bool overwrite);

// Empty when `counts` (layers x experts, [layer][expert]) is one top-k consistent iteration, and sets
// `tokens` to its token count; else what is wrong, naming the MoE layer (decoder-layer index) and
// expert. The caller adds the file and iteration.
std::string load_problem(const TraceShape& shape, const std::vector<std::uint32_t>& counts, std::uint64_t& tokens);

// Tokens of a top-k consistent iteration: the first layer's counts summed, divided by top_k.
std::uint64_t load_tokens(const TraceShape& shape, const std::vector<std::uint32_t>& counts);

}  // namespace moesim::traces
