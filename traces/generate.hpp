// Synthetic routing traces for any architecture's shape, seeded and deterministic: the same
// parameters and seed give byte-identical token data on every machine (fixed PRNG, own
// distributions; see traces/sampling.hpp). The model (docs/trace-generator.md):
//   popularity  per layer, expert shares follow a Zipf law over a ranking of the experts drawn from
//               `popularity_seed` (not `seed`: every sample of one model has the same hot experts),
//               or given shares per layer (`layer_shares`, e.g. from published expert counts);
//               optionally with `hot_experts` experts sharing `hot_share` of all assignments;
//   affinity    slot i of a token's top-k at layer l+1 is, with probability `affinity`, the
//               successor of its i-th expert at layer l (the expert of the same popularity rank), else
//               drawn by popularity; 0 makes layers independent;
//   drift       popularity rotates over the ranking as the trace advances: by `drift` * E ranks
//               between the first and the last token;
//   sequences   fixed or uniformly distributed lengths; gate weights optional.
// Tokens stream into a TraceWriter in blocks: memory is flat in the trace length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "traces/trace.hpp"

namespace moesim::traces {

struct SyntheticParams {
  TraceShape shape;
  std::uint64_t tokens = 0;
  std::uint64_t seed = 1;             // the sampling of tokens only
  std::uint64_t popularity_seed = 1;  // the experts' popularity ranking and the calibration
  // Per MoE layer (the shape's order), every expert's target share, summing to 1; replaces the Zipf
  // law and the seeded ranking (experts rank by share, ties by id). Empty: Zipf.
  std::vector<std::vector<double>> layer_shares;
  std::string layer_shares_source;  // where layer_shares came from, for the trace's metadata
  double zipf = 1.0;           // Zipf exponent of expert popularity, >= 0 (0: uniform)
  int hot_experts = 0;         // 0: no hot set
  double hot_share = 0.0;      // share of all assignments that go to the hot experts, in (0, 1)
  double affinity = 0.5;       // cross-layer affinity, in [0, 1]
  double drift = 0.0;          // popularity rotation over the trace, in [0, 1] (fraction of E ranks)
  int seq_len_min = 512;       // sequence lengths, uniform in [min, max]; fixed when equal
  int seq_len_max = 512;
  bool weights = false;        // emit gate weights
};

// One violated rule: `param` is the parameter's name as the CLI spells it ("hot-share").
struct ParamProblem {
  std::string param;
  std::string problem;
};
std::vector<ParamProblem> check_synthetic_params(const SyntheticParams& params);

// The per-rank target shares of one layer (rank 0 most popular), after capping any share above
// 1/top_k (an expert cannot be in a token's top-k more than once). Sums to 1. With layer_shares,
// the profile of MoE layer `layer` (its position in shape.layers); otherwise the same for all.
std::vector<double> popularity_profile(const SyntheticParams& params, std::size_t layer = 0);

// The per-expert target shares (expert id order) that generate_synthetic realises at MoE layer
// `layer`: the profile mapped back through the layer's ranking.
std::vector<double> expert_shares(const SyntheticParams& params, std::size_t layer);

// Per-layer shares from an expert-count file in the OLMoE project's format: a JSON object with keys
// "layerN" (N a decoder-layer index of one of the shape's MoE layers), each an object mapping every
// expert id ("0" .. E-1) to its non-negative count. The first MoE layer must be counted. Layers
// between two counted ones get shares interpolated linearly in the layer index; layers after the
// last counted one hold its shares. Throws InputError naming the file and the key at fault.
std::vector<std::vector<double>> load_expert_count_shares(const std::string& path, const TraceShape& shape,
                                                          std::vector<int>* counted_layers = nullptr);

// The meta a writer for this trace is created with (token_count set, sequence_count filled in by
// the writer).
TraceMeta synthetic_meta(const SyntheticParams& params);

// Writes params.tokens tokens to `out` (does not call out.finish()). Throws InputError when
// check_synthetic_params finds a problem.
void generate_synthetic(const SyntheticParams& params, TraceWriter& out);

}  // namespace moesim::traces
