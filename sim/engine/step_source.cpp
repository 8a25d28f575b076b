#include "sim/engine/step_source.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "sim/placement/routing_rule.hpp"
#include "traces/sampling.hpp"

namespace moesim::sim {

void StepBatch::clear() {
  home.clear();
  token_index.clear();
  experts.clear();
  for (auto& a : attention) {
    a.new_tokens.clear();
    a.context.clear();
  }
  for (auto& l : logits) l.clear();
}

SequenceCursor::SequenceCursor(traces::TraceReader& reader) : reader_(reader) {
  const auto& shape = reader.meta().shape;
  ids_per_token_ = shape.layers.size() * static_cast<std::size_t>(shape.top_k);
  if (reader.meta().token_count == 0) throw common::InputError("the trace has no tokens; a workload needs at least one");
}

bool SequenceCursor::fill() {
  if (pos_ < block_.size()) return true;
  pos_ = 0;
  if (reader_.next(block_)) return block_.size() > 0;
  reader_.rewind();
  ++wraps_;
  in_pass_ = 0;
  return reader_.next(block_) && block_.size() > 0;
}

void SequenceCursor::next(TraceSequence& out) {
  out.experts.reset();
  out.tokens = 0;
  out.ordinal = ordinal_++;
  if (!fill()) throw common::InputError("the trace has no tokens; a workload needs at least one");
  const std::uint64_t key = in_pass_++;
  // The same trace sequence, read before and still held: share it (the reading below only skips).
  std::shared_ptr<const std::vector<std::uint16_t>> shared;
  if (wraps_ > 0)
    if (auto it = held_.find(key); it != held_.end()) shared = it->second.lock();
  auto routing = shared ? nullptr : std::make_shared<std::vector<std::uint16_t>>();
  const std::uint32_t id = block_.sequence[pos_];
  // A sequence may straddle blocks: keep reading while the id stays the same. Rewinding ends it.
  for (;;) {
    while (pos_ < block_.size() && block_.sequence[pos_] == id) {
      if (routing) {
        const auto* e = block_.experts.data() + pos_ * ids_per_token_;
        routing->insert(routing->end(), e, e + ids_per_token_);
      }
      ++out.tokens;
      ++pos_;
    }
    if (pos_ < block_.size()) break;
    const std::uint64_t wraps = wraps_;
    if (!fill()) break;
    // The trace started again: a new sequence begins, even where the trace's last sequence has the
    // first one's id (a trace of one sequence would otherwise grow this one forever).
    if (wraps_ != wraps) break;
    if (block_.sequence[pos_] != id) break;
  }
  if (shared) {
    out.experts = std::move(shared);
    return;
  }
  out.experts = std::move(routing);
  held_[key] = out.experts;
  if (held_.size() >= prune_at_) {
    std::erase_if(held_, [](const auto& kv) { return kv.second.expired(); });
    prune_at_ = std::max<std::size_t>(64, 2 * held_.size());
  }
}

namespace {

class DecodeSource final : public StepSource {
 public:
  DecodeSource(std::unique_ptr<SequenceFeed> feed, int dp, int batch, bool staggered)
      : feed_(std::move(feed)), cursor_(*feed_), dp_(dp), slots_(static_cast<std::size_t>(batch)) {
    if (dp < 1 || batch < 1) throw common::InputError("decode needs at least one sequence and one rank");
    // Staggered start: slot i of B joins its first sequence at position floor(i x length / B), its
    // earlier tokens already in the KV cache, so the batch is spread over positions as a serving
    // batch is in steady state (continuous batching), not in lock-step on every prompt's first
    // tokens. Sequences loaded later start at position 0, at whatever step their slot frees.
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      load(slots_[i]);
      if (staggered) slots_[i].next_token = i * slots_[i].seq.tokens / slots_.size();
    }
  }

  bool next(StepBatch& step) override {
    step.clear();
    step.attention.resize(static_cast<std::size_t>(dp_));
    const std::size_t ids = cursor_.ids_per_token();
    for (auto& s : slots_) {
      if (s.next_token >= s.seq.tokens) load(s);
      const int home = home_rank(s.seq.ordinal, dp_);
      step.home.push_back(home);
      step.token_index.push_back(token_counter_++);
      const auto* e = s.seq.token(s.next_token, ids);
      step.experts.insert(step.experts.end(), e, e + ids);
      auto& a = step.attention[static_cast<std::size_t>(home)];
      a.new_tokens.push_back(1);
      a.context.push_back(static_cast<long>(s.next_token));
      ++s.next_token;
    }
    return true;
  }
  bool repeated() const override { return cursor_.wrapped(); }
  std::uint64_t sequences_started() const override { return started_; }

 private:
  struct Slot {
    TraceSequence seq;
    std::size_t next_token = 0;
  };
  void load(Slot& s) {
    cursor_.next(s.seq);
    s.next_token = 0;
    ++started_;
  }
  std::unique_ptr<SequenceFeed> feed_;
  SequenceFeed& cursor_;
  int dp_;
  std::vector<Slot> slots_;
  std::uint64_t token_counter_ = 0;
  std::uint64_t started_ = 0;
};

class PrefillSource final : public StepSource {
 public:
  PrefillSource(std::unique_ptr<SequenceFeed> feed, int dp, long budget)
      : feed_(std::move(feed)), cursor_(*feed_), dp_(dp), budget_(budget) {
    if (dp < 1 || budget < 1) throw common::InputError("prefill needs tokens_per_step >= 1");
  }

  bool next(StepBatch& step) override {
    step.clear();
    step.attention.resize(static_cast<std::size_t>(dp_));
    step.logits.resize(static_cast<std::size_t>(dp_));
    const std::size_t ids = cursor_.ids_per_token();
    long room = budget_;
    while (room > 0) {
      if (offset_ >= current_.tokens) {
        cursor_.next(current_);
        ++started_;
        offset_ = 0;
        // A whole sequence that does not fit starts the next step, unless it could never fit.
        const long len = static_cast<long>(current_.tokens);
        if (len > room && len <= budget_ && room < budget_) break;
      }
      const long take = std::min<long>(room, static_cast<long>(current_.tokens - offset_));
      const int home = home_rank(current_.ordinal, dp_);
      auto& a = step.attention[static_cast<std::size_t>(home)];
      a.new_tokens.push_back(take);
      a.context.push_back(static_cast<long>(offset_));
      // A prompt's logits are computed once, for its last token (the first generated token's).
      const bool last = offset_ + static_cast<std::size_t>(take) == current_.tokens;
      step.logits[static_cast<std::size_t>(home)].push_back(last ? 1 : 0);
      for (long t = 0; t < take; ++t) {
        step.home.push_back(home);
        step.token_index.push_back(token_counter_++);
        const auto* e = current_.token(offset_ + static_cast<std::size_t>(t), ids);
        step.experts.insert(step.experts.end(), e, e + ids);
      }
      offset_ += static_cast<std::size_t>(take);
      room -= take;
    }
    return true;
  }
  bool repeated() const override { return cursor_.wrapped(); }
  std::uint64_t sequences_started() const override { return started_; }

 private:
  std::unique_ptr<SequenceFeed> feed_;
  SequenceFeed& cursor_;
  int dp_;
  long budget_;
  TraceSequence current_;
  std::size_t offset_ = 0;
  std::uint64_t token_counter_ = 0;
  std::uint64_t started_ = 0;
};

class SequenceReader final : public traces::TraceReader {
 public:
  SequenceReader(const traces::TraceShape& shape, long length) : length_(length) {
    if (length < 1) throw common::InputError("trace: balanced needs workload.sequence_length >= 1");
    meta_.shape = shape;
    meta_.shape.layers.clear();
    meta_.source = "trace: balanced (no recorded routing: sequences of " + std::to_string(length) + " tokens)";
    meta_.token_count = static_cast<std::uint64_t>(length);
    meta_.sequence_count = 1;
  }
  const traces::TraceMeta& meta() const override { return meta_; }
  // Tokens without routing (the shape has no MoE layers): the balanced source draws all of it.
  bool next(traces::TokenBlock& block, std::size_t max_tokens) override {
    block.clear();
    while (block.size() < max_tokens && next_ < static_cast<std::size_t>(length_)) {
      block.sequence.push_back(0);
      block.position.push_back(static_cast<std::uint32_t>(next_++));
    }
    return block.size() > 0;
  }
  void rewind() override { next_ = 0; }

 private:
  traces::TraceMeta meta_;
  long length_;
  std::size_t next_ = 0;
};

class BalancedSource final : public StepSource {
 public:
  BalancedSource(std::unique_ptr<StepSource> inner, const traces::TraceShape& shape, std::uint64_t seed)
      : inner_(std::move(inner)), k_(shape.top_k), layers_(shape.layers.size()), seed_(seed) {
    if (shape.num_experts < 1 || shape.top_k < 1 || shape.top_k > shape.num_experts)
      throw common::InputError("balanced routing needs 1 <= top_k <= experts");
    deck_.resize(static_cast<std::size_t>(shape.num_experts));
  }

  bool next(StepBatch& step) override {
    if (!inner_->next(step)) return false;
    traces::Rng rng(traces::mix_seed(seed_, step_++));
    step.experts.assign(step.size() * layers_ * static_cast<std::size_t>(k_), 0);
    // The step's tokens by home rank, in step order.
    std::vector<std::vector<std::size_t>> by_home(step.attention.size());
    for (std::size_t t = 0; t < step.size(); ++t) by_home[static_cast<std::size_t>(step.home[t])].push_back(t);
    const auto k = static_cast<std::size_t>(k_);
    const std::size_t per = layers_ * k;
    for (std::size_t l = 0; l < layers_; ++l)
      for (const auto& tokens : by_home) {
        std::size_t used = deck_.size();  // an empty deck: shuffle on first use
        for (const std::size_t t : tokens) {
          std::uint16_t* out = step.experts.data() + t * per + l * k;
          for (std::size_t j = 0; j < k; ++j) {
            if (used == deck_.size()) {
              for (std::size_t e = 0; e < deck_.size(); ++e) deck_[e] = static_cast<std::uint16_t>(e);
              traces::shuffle(deck_, rng);
              used = 0;
            }
            // A deck begun in the middle of a token may repeat one of its experts: take the next
            // card it does not have (one exists: the deck holds all E >= k experts).
            std::size_t pick = used;
            while (std::find(out, out + j, deck_[pick]) != out + j) ++pick;
            std::swap(deck_[used], deck_[pick]);
            out[j] = deck_[used++];
          }
        }
      }
    return true;
  }
  bool repeated() const override { return false; }
  std::uint64_t sequences_started() const override { return inner_->sequences_started(); }

 private:
  std::unique_ptr<StepSource> inner_;
  int k_;
  std::size_t layers_;
  std::uint64_t seed_;
  std::uint64_t step_ = 0;
  std::vector<std::uint16_t> deck_;
};

}  // namespace

std::unique_ptr<traces::TraceReader> make_sequence_reader(const traces::TraceShape& shape, long sequence_length) {
  return std::make_unique<SequenceReader>(shape, sequence_length);
}

std::unique_ptr<StepSource> make_balanced_source(std::unique_ptr<StepSource> inner, const traces::TraceShape& shape,
                                                 std::uint64_t seed) {
  return std::make_unique<BalancedSource>(std::move(inner), shape, seed);
}

std::unique_ptr<StepSource> make_decode_source(traces::TraceReader& reader, int dp, int batch_sequences,
                                               bool staggered) {
  return std::make_unique<DecodeSource>(std::make_unique<SequenceCursor>(reader), dp, batch_sequences, staggered);
}

std::unique_ptr<StepSource> make_prefill_source(traces::TraceReader& reader, int dp, long tokens_per_step) {
  return std::make_unique<PrefillSource>(std::make_unique<SequenceCursor>(reader), dp, tokens_per_step);
}

std::unique_ptr<StepSource> make_decode_source(std::unique_ptr<SequenceFeed> feed, int dp, int batch_sequences,
                                               bool staggered) {
  return std::make_unique<DecodeSource>(std::move(feed), dp, batch_sequences, staggered);
}

std::unique_ptr<StepSource> make_prefill_source(std::unique_ptr<SequenceFeed> feed, int dp, long tokens_per_step) {
  return std::make_unique<PrefillSource>(std::move(feed), dp, tokens_per_step);
}

namespace {

class MixedFeed final : public SequenceFeed {
 public:
  MixedFeed(const std::vector<traces::TraceReader*>& readers, const std::vector<double>& weights, std::uint64_t seed)
      : rng_(seed) {
    if (readers.empty() || readers.size() != weights.size())
      throw common::InputError("a workload mix needs one weight per trace, and at least one trace");
    double total = 0.0;
    for (std::size_t i = 0; i < readers.size(); ++i) {
      if (!(weights[i] > 0.0) || !std::isfinite(weights[i]))
        throw common::InputError("a workload mix needs weights > 0, got " + std::to_string(weights[i]));
      cursors_.push_back(std::make_unique<SequenceCursor>(*readers[i]));
      if (cursors_.back()->ids_per_token() != cursors_.front()->ids_per_token())
        throw common::InputError("the traces of a workload mix must have the same routing shape");
      total += weights[i];
      cumulative_.push_back(total);
    }
    for (double& c : cumulative_) c /= total;
  }
  void next(TraceSequence& out) override {
    const double u = rng_.uniform();
    std::size_t i = 0;
    while (i + 1 < cumulative_.size() && u >= cumulative_[i]) ++i;
    cursors_[i]->next(out);
    out.ordinal = ordinal_++;
  }
  bool wrapped() const override {
    return std::any_of(cursors_.begin(), cursors_.end(), [](const auto& c) { return c->wrapped(); });
  }
  std::size_t ids_per_token() const override { return cursors_.front()->ids_per_token(); }

 private:
  std::vector<std::unique_ptr<SequenceCursor>> cursors_;
  std::vector<double> cumulative_;
  traces::Rng rng_;
  std::uint64_t ordinal_ = 0;
};

class PhasedSource final : public StepSource {
 public:
  explicit PhasedSource(std::vector<SourcePhase> phases) : phases_(std::move(phases)) {
    if (phases_.empty()) throw common::InputError("a phased workload needs at least one phase");
    for (const auto& p : phases_)
      if (!p.source || p.steps < 1) throw common::InputError("every workload phase needs a source and steps >= 1");
  }
  bool next(StepBatch& step) override {
    if (done_ == phases_[current_].steps) {
      done_ = 0;
      current_ = (current_ + 1) % phases_.size();
    }
    ++done_;
    return phases_[current_].source->next(step);
  }
  bool repeated() const override {
    return std::any_of(phases_.begin(), phases_.end(), [](const auto& p) { return p.source->repeated(); });
  }
  std::uint64_t sequences_started() const override {
    std::uint64_t n = 0;
    for (const auto& p : phases_) n += p.source->sequences_started();
    return n;
  }

 private:
  std::vector<SourcePhase> phases_;
  std::size_t current_ = 0;
  int done_ = 0;  // steps the current phase has made
};

}  // namespace

std::unique_ptr<SequenceFeed> make_mixed_feed(const std::vector<traces::TraceReader*>& readers,
                                              const std::vector<double>& weights, std::uint64_t seed) {
  return std::make_unique<MixedFeed>(readers, weights, seed);
}

std::unique_ptr<StepSource> make_phased_source(std::vector<SourcePhase> phases) {
  return std::make_unique<PhasedSource>(std::move(phases));
}

}  // namespace moesim::sim
