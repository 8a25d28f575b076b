#include "traces/memory_trace.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "traces/format_common.hpp"

namespace moesim::traces {

namespace {

constexpr const char* kWhere = "memory trace";

const TraceShape& checked(const TraceShape& shape) {
  validate_shape(shape, kWhere);
  return shape;
}

void check_all(const TokenBlock& tokens, TokenChecker& checker) {
  if (auto p = checker.check_block(tokens)) {
    std::uint64_t t = p->token;
    if (t < tokens.sequence.size() && t < tokens.position.size())
      throw common::InputError(std::string(kWhere) + ": " + describe_token(t, tokens.sequence[t], tokens.position[t]) +
                               ": " + p->what);
    throw common::InputError(std::string(kWhere) + ": " + p->what);
  }
}

class MemoryReader final : public TraceReader {
 public:
  explicit MemoryReader(const MemoryTrace& trace) : trace_(trace), meta_(trace.meta) {
    TokenChecker checker(checked(meta_.shape), meta_.has_weights);
    check_all(trace_.tokens, checker);
    meta_.token_count = checker.tokens();
    meta_.sequence_count = checker.sequences();
    per_ = ids_per_token(meta_.shape);
  }
  const TraceMeta& meta() const override { return meta_; }
  bool next(TokenBlock& block, std::size_t max_tokens) override {
    block.clear();
    const std::size_t n = trace_.tokens.size();
    if (cursor_ >= n || max_tokens == 0) return false;
    std::size_t count = std::min(max_tokens, n - cursor_);
    append_tokens(block, trace_.tokens, cursor_, count, per_);
    cursor_ += count;
    return true;
  }
  void rewind() override { cursor_ = 0; }

 private:
  const MemoryTrace& trace_;
  TraceMeta meta_;
  std::size_t per_ = 0;
  std::size_t cursor_ = 0;
};

class MemoryWriter final : public TraceWriter {
 public:
  MemoryWriter(MemoryTrace& target, const TraceMeta& meta)
      : target_(target), meta_(meta), checker_(checked(meta.shape), meta.has_weights) {
    per_ = ids_per_token(meta_.shape);
  }
  void write(const TokenBlock& block) override {
    if (finished_) throw common::RunError("memory trace: write() after finish()");
    if (auto p = checker_.check_block(block)) {
      std::uint64_t index = tokens_.size() + p->token;
      std::string at = p->token < block.sequence.size() && p->token < block.position.size()
                           ? describe_token(index, block.sequence[p->token], block.position[p->token]) + ": "
                           : std::string();
      throw common::InputError(std::string(kWhere) + ": " + at + p->what);
    }
    append_tokens(tokens_, block, 0, block.size(), per_);
  }
  void finish() override {
    if (finished_) return;
    meta_.token_count = checker_.tokens();
    meta_.sequence_count = checker_.sequences();
    target_.meta = meta_;
    target_.tokens = std::move(tokens_);
    finished_ = true;
  }

 private:
  MemoryTrace& target_;
  TraceMeta meta_;
  TokenChecker checker_;
  TokenBlock tokens_;
  std::size_t per_ = 0;
  bool finished_ = false;
};

}  // namespace

void append_tokens(TokenBlock& to, const TokenBlock& from, std::size_t first, std::size_t count,
                   std::size_t per) {
  to.sequence.insert(to.sequence.end(), from.sequence.begin() + static_cast<std::ptrdiff_t>(first),
                     from.sequence.begin() + static_cast<std::ptrdiff_t>(first + count));
  to.position.insert(to.position.end(), from.position.begin() + static_cast<std::ptrdiff_t>(first),
                     from.position.begin() + static_cast<std::ptrdiff_t>(first + count));
  const auto lo = static_cast<std::ptrdiff_t>(first * per);
  const auto hi = static_cast<std::ptrdiff_t>((first + count) * per);
  to.experts.insert(to.experts.end(), from.experts.begin() + lo, from.experts.begin() + hi);
  if (!from.weights.empty()) to.weights.insert(to.weights.end(), from.weights.begin() + lo, from.weights.begin() + hi);
}

std::unique_ptr<TraceReader> read_memory_trace(const MemoryTrace& trace) { return std::make_unique<MemoryReader>(trace); }

std::unique_ptr<TraceWriter> write_memory_trace(MemoryTrace& target, const TraceMeta& meta) {
  return std::make_unique<MemoryWriter>(target, meta);
}

MemoryTrace read_all(TraceReader& reader) {
  MemoryTrace trace;
  trace.meta = reader.meta();
  const std::size_t per = ids_per_token(trace.meta.shape);
  trace.tokens.sequence.reserve(trace.meta.token_count);
  trace.tokens.position.reserve(trace.meta.token_count);
  trace.tokens.experts.reserve(trace.meta.token_count * per);
  if (trace.meta.has_weights) trace.tokens.weights.reserve(trace.meta.token_count * per);
  TokenBlock block;
  while (reader.next(block, 1u << 16)) append_tokens(trace.tokens, block, 0, block.size(), per);
  return trace;
}

MemoryTrace load_trace(const std::string& path) {
  auto reader = open_trace(path);
  return read_all(*reader);
}

void save_trace(const MemoryTrace& trace, const std::string& path, Encoding encoding, bool overwrite) {
  auto writer = create_trace_writer(path, trace.meta, encoding, overwrite);
  writer->write(trace.tokens);
  writer->finish();
}

}  // namespace moesim::traces
