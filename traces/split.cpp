#include "traces/split.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/error.hpp"
#include "traces/format_common.hpp"
#include "traces/memory_trace.hpp"

namespace moesim::traces {

namespace {

// splitmix64 (Steele, Lea, Flood 2014): fully specified, so splits agree across compilers.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) without modulo bias.
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t threshold = (0 - n) % n;
    for (;;) {
      const std::uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

 private:
  std::uint64_t state_;
};

std::string fraction_text(double f) {
  std::ostringstream ss;
  ss << f;
  return ss.str();
}

}  // namespace

std::vector<bool> choose_profile_sequences(std::uint64_t sequences, double fraction, std::uint64_t seed) {
  if (!std::isfinite(fraction) || fraction <= 0.0 || fraction >= 1.0)
    throw common::UsageError("--fraction " + fraction_text(fraction) +
                             ": expected a number strictly between 0 and 1 (the profile part's share of sequences)");
  if (sequences < 2)
    throw common::InputError("the trace holds " + std::to_string(sequences) +
                             " sequence(s): splitting by sequence needs at least 2");
  auto m = static_cast<std::uint64_t>(std::llround(fraction * static_cast<double>(sequences)));
  m = std::clamp<std::uint64_t>(m, 1, sequences - 1);
  std::vector<std::uint32_t> order(sequences);
  for (std::uint64_t i = 0; i < sequences; ++i) order[i] = static_cast<std::uint32_t>(i);
  SplitMix64 rng(seed);
  for (std::uint64_t i = sequences - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  std::vector<bool> profile(sequences, false);
  for (std::uint64_t i = 0; i < m; ++i) profile[order[i]] = true;
  return profile;
}

SplitReport split_trace(TraceReader& input, const WriterFactory& profile, const WriterFactory& heldout,
                        const SplitOptions& options) {
  const TraceMeta& meta = input.meta();
  if (meta.sequence_count > UINT32_MAX) throw common::InputError("the trace has too many sequences to split");
  const std::vector<bool> in_profile = choose_profile_sequences(meta.sequence_count, options.fraction, options.seed);
  const std::string how = "fraction " + fraction_text(options.fraction) + ", seed " + std::to_string(options.seed);
  TraceMeta pm = meta, hm = meta;
  pm.source = meta.source + "; split: profile part (" + how + ")";
  hm.source = meta.source + "; split: held-out part (" + how + ")";
  auto pw = profile(pm);
  auto hw = heldout(hm);
  const std::size_t per = ids_per_token(meta.shape);
  TokenBlock block, pb, hb;
  SplitReport report;
  report.sequences = meta.sequence_count;
  std::uint64_t ordinal = 0;
  bool any = false;
  std::uint32_t last = 0;
  auto flush = [&](TokenBlock& b, TraceWriter& w, bool force) {
    if (b.sequence.empty() || (!force && b.size() < 4096)) return;
    w.write(b);
    b.clear();
  };
  input.rewind();
  while (input.next(block, 4096)) {
    for (std::size_t t = 0; t < block.size(); ++t) {
      if (any && block.sequence[t] != last) ++ordinal;
      if (!any || block.sequence[t] != last) {
        if (ordinal >= in_profile.size())
          throw common::InputError("the trace holds more sequences than its metadata announces (" +
                                   std::to_string(meta.sequence_count) + ")");
        (in_profile[ordinal] ? report.profile_sequences : report.heldout_sequences) += 1;
      }
      any = true;
      last = block.sequence[t];
      const bool to_profile = in_profile[ordinal];
      append_tokens(to_profile ? pb : hb, block, t, 1, per);
      (to_profile ? report.profile_tokens : report.heldout_tokens) += 1;
    }
    flush(pb, *pw, false);
    flush(hb, *hw, false);
  }
  flush(pb, *pw, true);
  flush(hb, *hw, true);
  pw->finish();
  hw->finish();
  return report;
}

}  // namespace moesim::traces
