// A trace reader that keeps what it read in memory, so that reading the trace again costs a copy
// instead of reading and checking the file again (docs/simulator.md, "Steps"). A workload that
// outruns its trace (a decode batch larger than the trace's sequences, a prefill of more tokens than
// it holds) reads it from the start many times: each reading of a file checks every block's CRC and
// every token again. From the first time it starts again, the reader keeps what it reads; once it
// has kept one complete reading within `budget` bytes it serves every later one from memory (a
// trace read once costs no memory; a larger one is read from the file every time, as before: a
// small trace is the one read again thousands of times, a large one a few times at most). The
// blocks served are the ones read, token for token.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "traces/trace.hpp"

namespace moesim::traces {

class CachingTraceReader final : public TraceReader {
 public:
  static constexpr std::size_t kDefaultBudget = std::size_t{64} << 20;  // 64 MiB
  explicit CachingTraceReader(std::unique_ptr<TraceReader> inner, std::size_t budget = kDefaultBudget);
  const TraceMeta& meta() const override { return inner_->meta(); }
  bool next(TokenBlock& block, std::size_t max_tokens = 4096) override;
  void rewind() override;
  // Whether the whole trace is held in memory (after a second complete reading within the budget).
  bool cached() const { return complete_; }

 private:
  enum class Mode { kFirst, kFilling, kServing, kPassing };
  std::unique_ptr<TraceReader> inner_;
  std::size_t budget_;
  std::size_t bytes_ = 0;
  std::size_t block_max_ = 0;  // max_tokens of the reading that filled the cache
  Mode mode_ = Mode::kFirst;
  bool complete_ = false;
  std::size_t served_ = 0;  // serving: the next cached block
  std::vector<TokenBlock> blocks_;
};

}  // namespace moesim::traces
