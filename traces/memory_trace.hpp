// A whole trace held in memory (TraceMeta plus one TokenBlock), with a reader over it and a writer
// into it: for tests, the generator and small traces. The reader validates the tokens when it is
// created (same rules as the files, traces/format_common.hpp); the writer fills its target only on
// finish(), so a writer destroyed early leaves the target untouched.
#pragma once

#include <memory>
#include <string>

#include "traces/trace.hpp"

namespace moesim::traces {

struct MemoryTrace {
  TraceMeta meta;     // token_count and sequence_count match `tokens`
  TokenBlock tokens;  // every token of the trace, in order
};

// Reads `trace`, which must outlive the reader. Throws InputError ("memory trace: token 5 ...") when
// the tokens break a rule; meta counts are recomputed from the tokens.
std::unique_ptr<TraceReader> read_memory_trace(const MemoryTrace& trace);
// Collects tokens written to it; on finish() stores them with `meta` (counts filled in) in `target`,
// which must outlive the writer.
std::unique_ptr<TraceWriter> write_memory_trace(MemoryTrace& target, const TraceMeta& meta);

// Reads every remaining token of `reader` into memory.
MemoryTrace read_all(TraceReader& reader);
// Opens a trace file and reads it whole (small traces and tests only).
MemoryTrace load_trace(const std::string& path);
// Writes `trace` to a file in one go.
void save_trace(const MemoryTrace& trace, const std::string& path, Encoding encoding, bool overwrite);

// Appends tokens [first, first + count) of `from` to `to` (the same shape, `per` ids per token).
void append_tokens(TokenBlock& to, const TokenBlock& from, std::size_t first, std::size_t count,
                   std::size_t per);

}  // namespace moesim::traces
