// Splitting a trace by sequence into a profile part and a held-out part (FORMAT.md "Splitting"):
// seeded and deterministic on every platform (the same seed and trace give the same split), a
// sequence is never split between parts, tokens keep their order, sequence ids and positions.
#pragma once

#include <cstdint>
#include <vector>

#include "traces/import.hpp"
#include "traces/trace.hpp"

namespace moesim::traces {

struct SplitOptions {
  double fraction = 0.5;  // share of the sequences in the profile part, 0 < fraction < 1
  std::uint64_t seed = 0;
};

struct SplitReport {
  std::uint64_t sequences = 0;
  std::uint64_t profile_sequences = 0;
  std::uint64_t heldout_sequences = 0;
  std::uint64_t profile_tokens = 0;
  std::uint64_t heldout_tokens = 0;
};

// Which sequences, by their order in the trace (0 .. sequences-1), go to the profile part: exactly
// round(fraction * sequences), at least 1 and at most sequences-1, chosen by a seeded shuffle
// (splitmix64 and Fisher-Yates, independent of the standard library). Throws UsageError on a bad
// fraction, InputError when there are fewer than 2 sequences.
std::vector<bool> choose_profile_sequences(std::uint64_t sequences, double fraction, std::uint64_t seed);

// Streams `input` into the two writers (made with the input's metadata, `source` extended) and
// finishes both only when the whole input was read.
SplitReport split_trace(TraceReader& input, const WriterFactory& profile, const WriterFactory& heldout,
                        const SplitOptions& options);

}  // namespace moesim::traces
