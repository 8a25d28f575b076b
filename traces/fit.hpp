// Fit-and-scale: learn a routing model from a real trace and generate traces of any length with the
// same per-layer expert shares and adjacent-layer pair statistics. The model is a first-order Markov
// chain over top-k sets (docs/trace-generator.md gives the derivation and the measured accuracy):
//   state       a source token's routing at layer l (the chain's state space is the source's sets);
//   transition  keep following the same source token to l+1, or with probability `jump` back off
//               through a shared expert: pick one expert of the current set, continue with a random
//               source token that had that expert at l (a random walk that keeps the source's
//               per-layer marginals exactly);
//   smoothing   each emitted expert is, with probability `mutation`, replaced by a draw from the
//               layer's marginal; those draw weights are corrected iteratively so that the
//               replacements leave every expert's share unchanged;
//   sequences   generated sequences take the lengths (and token order) of source sequences drawn
//               uniformly, so per-batch locality resembles the source's.
// Deterministic for a given model, token count and seed. Memory: the model holds at most
// max_source_tokens source tokens; generation streams in blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "traces/generate.hpp"
#include "traces/trace.hpp"

namespace moesim::traces {

struct FitOptions {
  double jump = 0.03;       // per layer transition, probability of backing off through a shared expert
  double mutation = 0.01;   // per emitted expert, probability of a marginal replacement
  std::uint64_t max_source_tokens = 262144;  // larger sources are thinned by whole sequences
  std::uint64_t seed = 1;   // for the thinning
};

struct FittedModel {
  TraceShape shape;
  bool has_weights = false;
  std::string source;                    // the source trace's provenance line
  std::string source_sha256;             // of the source file, when known ("" otherwise)
  std::uint64_t source_token_count = 0;  // tokens in the source trace (before thinning)
  double jump = 0.0;
  double mutation = 0.0;
  std::vector<std::uint32_t> sequence_lengths;  // kept source sequences, in order
  std::vector<std::uint16_t> experts;           // kept tokens, [token][layer][k]
  std::vector<float> weights;                   // same layout, when has_weights
  std::vector<std::vector<double>> mutation_weights;  // [layer][expert]: corrected replacement weights
  std::vector<std::vector<double>> shares;            // [layer][expert]: the source's shares

  std::uint64_t tokens() const { return sequence_lengths.empty() ? 0 : experts.size() / per_token(); }
  std::size_t per_token() const { return shape.layers.size() * static_cast<std::size_t>(shape.top_k); }
};

// Rules: jump and mutation in [0, 1], max_source_tokens >= 1. Names as the CLI spells them.
std::vector<ParamProblem> check_fit_options(const FitOptions& options);

// Reads `source` from its current position to the end. Throws InputError on an empty trace or
// options that check_fit_options rejects.
FittedModel fit_model(TraceReader& source, const FitOptions& options = {});

// `drift` in [0, 1] and `shift` in [0, E): the generated tokens' expert ids rotate, token i of N
// relabelling every expert e to (e + shift + floor(drift x E x i / N)) mod E in every layer (the same
// for a whole token, so its cross-layer pairs keep their statistics under the new names). With drift,
// popularity moves drift x E experts along by the end, as the synthetic generator's drift does; a
// shift alone is a drift's end state held for the whole trace (other experts hot, the same skew),
// which stays the same when the trace is read again.
TraceMeta fitted_meta(const FittedModel& model, std::uint64_t tokens, std::uint64_t seed, double drift = 0.0,
                      int shift = 0);
// Writes `tokens` tokens to `out` (does not call out.finish()).
void generate_fitted(const FittedModel& model, std::uint64_t tokens, std::uint64_t seed, TraceWriter& out,
                     double drift = 0.0, int shift = 0);

// The storable form (JSON, schema_version 1; routing as base64 of little-endian arrays).
nlohmann::json model_to_json(const FittedModel& model);
// `name` is used in error messages (the file name). Throws InputError naming the key at fault.
FittedModel model_from_json(const nlohmann::json& doc, const std::string& name);
void save_model(const FittedModel& model, const std::string& path, bool overwrite);
FittedModel load_model(const std::string& path);

}  // namespace moesim::traces
