#include "sim/engine/load_source.hpp"

#include <algorithm>
#include <numeric>

#include "common/error.hpp"
#include "traces/sampling.hpp"

namespace moesim::sim {

namespace {

class LoadSource final : public StepSource {
 public:
  LoadSource(traces::LoadTraceReader& reader, bool decode, int dp, long sequence_length, std::uint64_t seed)
      : reader_(reader), decode_(decode), dp_(dp), sequence_length_(sequence_length), seed_(seed) {
    if (dp < 1) throw common::InputError("a load-only trace needs at least one data-parallel rank");
    if (sequence_length < 1) throw common::InputError("a load-only trace needs workload.sequence_length >= 1");
    const auto& shape = reader.meta().shape;
    layers_ = shape.layers.size();
    experts_ = static_cast<std::size_t>(shape.num_experts);
    k_ = static_cast<std::size_t>(shape.top_k);
  }

  bool next(StepBatch& step) override {
    if (!reader_.next(counts_)) {
      reader_.rewind();
      wrapped_ = true;
      if (!reader_.next(counts_)) throw common::InputError("the load-only trace has no iterations");
    }
    const auto& shape = reader_.meta().shape;
    const auto n = static_cast<std::size_t>(traces::load_tokens(shape, counts_));
    step.clear();
    step.attention.resize(static_cast<std::size_t>(dp_));
    if (!decode_) step.logits.resize(static_cast<std::size_t>(dp_));
    for (std::size_t t = 0; t < n; ++t) {
      step.home.push_back(static_cast<int>(t % static_cast<std::size_t>(dp_)));
      step.token_index.push_back(token_counter_++);
    }
    deal(step, n);
    attention(step, n);
    ++step_;
    return true;
  }
  bool repeated() const override { return wrapped_; }
  std::uint64_t sequences_started() const override { return started_; }

 private:
  // Per layer: the experts' assignments side by side, expert e repeated count[e] times (n x k slots);
  // dealt token t (of a shuffled order) takes slots t, t+n, ..., t+(k-1)n. Each expert's slots form
  // one run of at most n, which holds at most one slot of any stride-n sequence, so no token gets an
  // expert twice, and each expert gets exactly its count. The order is shuffled afresh for every
  // layer and step: a load-only trace has no cross-layer affinity, and a fixed order would invent one
  // (the same tokens meeting on the same experts layer after layer).
  void deal(StepBatch& step, std::size_t n) {
    traces::Rng rng(traces::mix_seed(seed_, step_));
    step.experts.assign(n * layers_ * k_, 0);
    order_.resize(n);
    for (std::size_t l = 0; l < layers_; ++l) {
      slots_.clear();
      for (std::size_t e = 0; e < experts_; ++e)
        slots_.insert(slots_.end(), counts_[l * experts_ + e], static_cast<std::uint16_t>(e));
      std::iota(order_.begin(), order_.end(), std::size_t{0});
      traces::shuffle(order_, rng);
      for (std::size_t t = 0; t < n; ++t) {
        std::uint16_t* out = step.experts.data() + (order_[t] * layers_ + l) * k_;
        for (std::size_t j = 0; j < k_; ++j) out[j] = slots_[t + j * n];
      }
    }
  }

  void attention(StepBatch& step, std::size_t n) {
    const auto dp = static_cast<std::size_t>(dp_);
    const auto length = static_cast<std::size_t>(sequence_length_);
    for (std::size_t r = 0; r < dp && r < n; ++r) {
      const std::size_t m = (n - r + dp - 1) / dp;  // tokens t < n with t mod dp == r
      auto& a = step.attention[r];
      if (decode_) {
        // One token of each of m sequences in flight, spread over the positions of a sequence.
        for (std::size_t j = 0; j < m; ++j) {
          a.new_tokens.push_back(1);
          a.context.push_back(static_cast<long>(j * length / m));
        }
        // The trace does not say when a sequence ends: the first step's are the ones counted.
        if (step_ == 0) started_ += m;
        continue;
      }
      // Whole prompts; each one ends in this step, so each computes its logits.
      for (std::size_t first = 0; first < m; first += length) {
        a.new_tokens.push_back(static_cast<long>(std::min(length, m - first)));
        a.context.push_back(0);
        step.logits[r].push_back(1);
        ++started_;
      }
    }
  }

  traces::LoadTraceReader& reader_;
  bool decode_;
  int dp_;
  long sequence_length_;
  std::uint64_t seed_;
  std::size_t layers_ = 0;
  std::size_t experts_ = 0;
  std::size_t k_ = 0;
  std::vector<std::uint32_t> counts_;
  std::vector<std::uint16_t> slots_;
  std::vector<std::size_t> order_;
  std::uint64_t step_ = 0;
  std::uint64_t token_counter_ = 0;
  std::uint64_t started_ = 0;
  bool wrapped_ = false;
};

}  // namespace

std::unique_ptr<StepSource> make_load_source(traces::LoadTraceReader& reader, bool decode, int dp,
                                             long sequence_length, std::uint64_t seed) {
  return std::make_unique<LoadSource>(reader, decode, dp, sequence_length, seed);
}

}  // namespace moesim::sim
