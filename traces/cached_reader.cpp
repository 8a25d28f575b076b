#include "traces/cached_reader.hpp"

#include <utility>

namespace moesim::traces {

namespace {

std::size_t block_bytes(const TokenBlock& b) {
  return b.sequence.size() * sizeof(std::uint32_t) + b.position.size() * sizeof(std::uint32_t) +
         b.experts.size() * sizeof(std::uint16_t) + b.weights.size() * sizeof(float);
}

}  // namespace

CachingTraceReader::CachingTraceReader(std::unique_ptr<TraceReader> inner, std::size_t budget)
    : inner_(std::move(inner)), budget_(budget) {}

bool CachingTraceReader::next(TokenBlock& block, std::size_t max_tokens) {
  if (mode_ == Mode::kServing) {
    if (max_tokens == block_max_) {
      if (served_ >= blocks_.size()) {
        block.clear();
        return false;
      }
      block = blocks_[served_++];
      return true;
    }
    // Asked for other block sizes: read the file from where the cache stands.
    mode_ = Mode::kPassing;
    inner_->rewind();
    for (std::size_t i = 0; i < served_; ++i) inner_->next(block, block_max_);
  }
  const bool got = inner_->next(block, max_tokens);
  if (mode_ != Mode::kFilling) return got;
  if (!got) {
    complete_ = true;
    return false;
  }
  if (blocks_.empty()) block_max_ = max_tokens;
  bytes_ += block_bytes(block);
  if (max_tokens != block_max_ || bytes_ > budget_) {
    mode_ = Mode::kPassing;
    blocks_.clear();
    blocks_.shrink_to_fit();
    return true;
  }
  blocks_.push_back(block);
  return true;
}

void CachingTraceReader::rewind() {
  if (complete_) {
    mode_ = Mode::kServing;
    served_ = 0;
    return;
  }
  inner_->rewind();
  if (mode_ == Mode::kFirst) mode_ = Mode::kFilling;
  if (mode_ == Mode::kFilling) {  // (started again before the end: fill from the start)
    blocks_.clear();
    bytes_ = 0;
  }
}

}  // namespace moesim::traces
