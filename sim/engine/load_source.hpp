// Steps from a load-only trace (traces/load_trace.hpp): step i replays iteration i of the trace,
// starting again from the first at the end (repeated() is then true). The step has the iteration's
// n tokens; at every MoE layer each expert gets exactly the iteration's count of them, and no token
// gets an expert twice. The trace records no per-token routes, so which tokens share an expert is
// drawn per layer by a seeded shuffle: no cross-layer affinity is invented. Token t of a step lives
// on data-parallel rank t mod DP. Attention: prefill packs each rank's tokens into prompts of
// `sequence_length` tokens (the last shorter); decode gives each token its own sequence, the rank's
// token j of m at context floor(j x sequence_length / m), as a staggered serving batch.
// sequences_started(): prefill, the prompts packed so far; decode, the first step's sequences.
#pragma once

#include <cstdint>
#include <memory>

#include "sim/engine/step_source.hpp"
#include "traces/load_trace.hpp"

namespace moesim::sim {

// `reader` must outlive the source. Throws InputError for dp < 1 or sequence_length < 1.
std::unique_ptr<StepSource> make_load_source(traces::LoadTraceReader& reader, bool decode, int dp,
                                             long sequence_length, std::uint64_t seed);

}  // namespace moesim::sim
