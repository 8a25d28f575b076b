// Turns a routing trace into simulation steps (docs/simulator.md, "Steps"). prefill packs whole
// sequences in trace order into steps of `tokens_per_step` tokens (a longer sequence is split into
// chunks over several steps); decode keeps `batch_sequences` sequences active, each step processes one
// token of each, and a finished sequence is replaced by the next; the first B sequences start
// staggered (slot i at position i x length / B), as a serving batch is in steady state. Sequence i of the trace (in trace
// order, counting on across repetitions) lives on data-parallel rank i mod DP. A trace that runs out
// is read again from the start; repeated() says so. Memory: one step plus the active sequences.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "models/costs.hpp"
#include "traces/trace.hpp"

namespace moesim::sim {

struct StepBatch {
  std::vector<int> home;                    // per token: its data-parallel (home) rank
  std::vector<std::uint64_t> token_index;   // per token: its index in the trace stream (replica choice)
  std::vector<std::uint16_t> experts;       // [token][layer][k]
  std::vector<models::AttentionBatch> attention;  // per DP rank: the sequences it attends this step
  // Per DP rank, parallel to attention[r]'s entries: 1 where the entry's last token is its sequence's
  // last prompt token (prefill), whose logits the LM head computes; empty for a rank: every token
  // gets logits (decode: each step samples one token of each sequence).
  std::vector<std::vector<std::uint8_t>> logits;
  std::size_t size() const { return home.size(); }
  void clear();
};

class StepSource {
 public:
  virtual ~StepSource() = default;
  // Fills the next step; false when no more steps can be made (never, for a non-empty trace).
  virtual bool next(StepBatch& step) = 0;
  virtual bool repeated() const = 0;  // the trace was read more than once
  virtual std::uint64_t sequences_started() const = 0;
};

// One sequence of the trace, whole. Its routing is shared, read-only, between the copies of the same
// trace sequence that are alive at once (a trace read again while its first reading is still held).
struct TraceSequence {
  std::uint64_t ordinal = 0;  // sequence number in trace order (counting on across repetitions)
  std::shared_ptr<const std::vector<std::uint16_t>> experts;  // [token][layer][k]
  std::size_t tokens = 0;
  const std::uint16_t* token(std::size_t t, std::size_t ids_per_token) const {
    return experts->data() + t * ids_per_token;
  }
};

// Where the inference sources take their sequences from: one trace read in order (SequenceCursor),
// or several drawn from by weight (make_mixed_feed).
class SequenceFeed {
 public:
  virtual ~SequenceFeed() = default;
  virtual void next(TraceSequence& out) = 0;
  virtual bool wrapped() const = 0;  // some trace was read more than once
  virtual std::size_t ids_per_token() const = 0;
};

// Reads a trace sequence by sequence (a sequence is a maximal run of tokens with the same id),
// starting again at the end. Throws InputError for an empty trace. A sequence read again while a
// copy of its earlier reading is still held (a decode batch larger than the trace) shares that
// copy's routing instead of holding it twice: memory is bounded by the trace or the sequences held,
// whichever is smaller.
class SequenceCursor final : public SequenceFeed {
 public:
  explicit SequenceCursor(traces::TraceReader& reader);
  void next(TraceSequence& out) override;
  bool wrapped() const override { return wraps_ > 0; }
  std::size_t ids_per_token() const override { return ids_per_token_; }

 private:
  bool fill();
  traces::TraceReader& reader_;
  traces::TokenBlock block_;
  std::size_t pos_ = 0;
  std::size_t ids_per_token_ = 0;
  std::uint64_t ordinal_ = 0;
  std::uint64_t wraps_ = 0;     // times the trace started again
  std::uint64_t in_pass_ = 0;   // sequences begun in the current reading of the trace
  // The routing handed out, by position in the trace (sequence index within a reading), while some
  // holder keeps it alive; expired entries are dropped as the map grows.
  std::unordered_map<std::uint64_t, std::weak_ptr<const std::vector<std::uint16_t>>> held_;
  std::size_t prune_at_ = 64;
};

// `trace: balanced` (docs/simulator.md, "Balanced routing"): sequences with no recorded routing. A
// reader of one sequence of `sequence_length` tokens, read again and again, with no routing at all
// (its shape has no MoE layers): make_balanced_source draws every step's.
std::unique_ptr<traces::TraceReader> make_sequence_reader(const traces::TraceShape& shape, long sequence_length);
// Gives every step `inner` makes perfectly balanced routing (replacing any it has): per MoE layer and
// home rank, the rank's tokens in step order draw their k experts from shuffled decks of all E
// experts, a fresh deck when one runs out (no expert twice for a token), so that every expert gets
// the same number of each rank's tokens, within one. Step i shuffles with mix_seed(seed, i): the
// same steps in every process and step range. repeated() is false: nothing recorded is replayed.
// `shape` gives the MoE layers, experts E and top-k (Architecture::trace_shape()).
std::unique_ptr<StepSource> make_balanced_source(std::unique_ptr<StepSource> inner, const traces::TraceShape& shape,
                                                 std::uint64_t seed);

std::unique_ptr<StepSource> make_decode_source(traces::TraceReader& reader, int dp, int batch_sequences,
                                               bool staggered = true);
std::unique_ptr<StepSource> make_prefill_source(traces::TraceReader& reader, int dp, long tokens_per_step);
std::unique_ptr<StepSource> make_decode_source(std::unique_ptr<SequenceFeed> feed, int dp, int batch_sequences,
                                               bool staggered = true);
std::unique_ptr<StepSource> make_prefill_source(std::unique_ptr<SequenceFeed> feed, int dp, long tokens_per_step);

// A workload mix (docs/simulator.md, "Phases and mixes"): every sequence is drawn from one of the
// readers, reader i with probability weights[i] / sum (weights > 0), by a generator seeded with
// `seed`; each reader is read in order and again from its start when it runs out. Sequences are
// numbered in the order drawn (their home rank follows from that number). The readers must have
// the same routing shape and outlive the feed.
std::unique_ptr<SequenceFeed> make_mixed_feed(const std::vector<traces::TraceReader*>& readers,
                                              const std::vector<double>& weights, std::uint64_t seed);

// Workload phases (docs/simulator.md, "Phases and mixes"): phase i's source makes `steps` steps, then
// the next phase's starts; after the last phase the first one goes on where it stopped, and so on.
struct SourcePhase {
  std::unique_ptr<StepSource> source;
  int steps = 0;
};
std::unique_ptr<StepSource> make_phased_source(std::vector<SourcePhase> phases);

}  // namespace moesim::sim
