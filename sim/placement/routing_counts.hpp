// Routing statistics a placement policy solves on (MoETuner's P and R), counted over a whole trace:
// per layer the tokens routed to each expert (one count per top-k assignment), and for adjacent MoE
// layers the tokens routed to e1 in layer l and to e2 in layer l+1 (every pair of the token's top-k
// sets, k x k per token). Counts are token-expert assignments, held as doubles.
// next_owner is the same pair count for residence dispatch (routing_rule.hpp), where a token's
// layer-(l+1) dispatch starts from its layer-l owner rank: per token, e1 its top-1 (highest gate) expert
// at layer l, e2 each of its k experts at layer l+1 (k pairs per token). The owner is the rank of the
// top-1 expert whenever the token's experts sit on distinct ranks (owner_rank's tie rule); when two or
// more share a rank, that rank owns the token instead, which depends on the placement. next_owner is
// the placement-independent approximation a solver can use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "traces/load_trace.hpp"
#include "traces/trace.hpp"

namespace moesim::sim {

struct RoutingCounts {
  std::vector<int> layers;
  int num_experts = 0;
  int top_k = 0;
  std::uint64_t tokens = 0;
  std::string trace_sha256;
  std::vector<std::vector<double>> load;  // [l][e]
  std::vector<std::vector<double>> next;  // [l][e1 * E + e2], l < layers.size() - 1
  // [l][e1 * E + e2] as next, e1 the top-1 expert only; empty where not counted (counts built by hand,
  // an online rebalancing window).
  std::vector<std::vector<double>> next_owner;
};

// Rewinds the reader first. Throws InputError for an expert id out of range (naming the token and
// layer), RunError for a reader that hands out a malformed block.
RoutingCounts count_routing(traces::TraceReader& reader, const std::string& trace_sha256);

// The weighted mean of several traces' routing (docs/placement.md, "Several traces: robust placement"):
// each trace's load and next are divided by its token count (so that a long trace does not outweigh a
// short one), combined with the weights normalised to sum 1, and multiplied by T, the arithmetic mean of
// the token counts rounded to an integer, so that the result stays in token units (each layer of load
// sums to T x top_k) and `tokens` is T. `weights` empty means equal weights. One trace comes back
// unchanged (its sha256 kept); a mix of several has trace_sha256 "". Throws InputError when `counts` is
// empty, the shapes differ, a trace has no tokens, or the weights are not one per trace, positive, finite.
// next_owner is mixed like next when every trace has it, else left empty.
RoutingCounts mix_routing(const std::vector<RoutingCounts>& counts, const std::vector<double>& weights = {});

// A copy whose next is `counts.next_owner`: the cross-layer pairs of residence dispatch, for a policy
// or objective that reads next (PlacementOptions::residence). Throws InputError when next_owner was not
// counted (is not sized like next).
RoutingCounts with_owner_pairs(const RoutingCounts& counts);

// The same from a load-only trace (rewound first): `load` summed over the iterations, `tokens` their
// tokens. `next` and `next_owner` hold zero matrices of the right size: a load-only trace has no
// per-token routes, so no cross-layer pairs to count.
RoutingCounts count_load_routing(traces::LoadTraceReader& reader, const std::string& trace_sha256);

}  // namespace moesim::sim
