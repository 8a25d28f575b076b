#include "sim/placement/routing_counts.hpp"

#include <cmath>

#include "common/error.hpp"

namespace moesim::sim {

namespace {

// Adds one token's routing (its top-k experts in every layer, layer-major) to the counts; `ordinal`
// is its index in the trace, for the message.
void count_token(RoutingCounts& c, const std::uint16_t* token, std::uint64_t ordinal) {
  const std::size_t layers = c.layers.size();
  const auto experts = static_cast<std::size_t>(c.num_experts);
  const auto k = static_cast<std::size_t>(c.top_k);
  for (std::size_t l = 0; l < layers; ++l) {
    const std::uint16_t* here = token + l * k;
    for (std::size_t i = 0; i < k; ++i) {
      if (here[i] >= experts)
        throw common::InputError("trace: token " + std::to_string(ordinal) + ", layer " + std::to_string(c.layers[l]) +
                                 ": expert " + std::to_string(here[i]) + " is out of range (num_experts " +
                                 std::to_string(experts) + ")");
      c.load[l][here[i]] += 1.0;
    }
    if (l + 1 == layers) continue;
    const std::uint16_t* there = here + k;
    std::vector<double>& pairs = c.next[l];
    for (std::size_t i = 0; i < k; ++i)
      for (std::size_t j = 0; j < k; ++j)
        if (there[j] < experts) pairs[static_cast<std::size_t>(here[i]) * experts + there[j]] += 1.0;
    // Residence: the token leaves layer l from (about) its top-1 expert's rank, listed first.
    std::vector<double>& owner_pairs = c.next_owner[l];
    for (std::size_t j = 0; j < k; ++j)
      if (there[j] < experts) owner_pairs[static_cast<std::size_t>(here[0]) * experts + there[j]] += 1.0;
  }
}

// Counts of `shape` with every load and pair at zero.
RoutingCounts zero_counts(const traces::TraceShape& shape, const std::string& trace_sha256) {
  RoutingCounts c;
  c.layers = shape.layers;
  c.num_experts = shape.num_experts;
  c.top_k = shape.top_k;
  c.trace_sha256 = trace_sha256;
  const std::size_t layers = shape.layers.size();
  const auto experts = static_cast<std::size_t>(shape.num_experts);
  c.load.assign(layers, std::vector<double>(experts, 0.0));
  c.next.assign(layers > 0 ? layers - 1 : 0, std::vector<double>(experts * experts, 0.0));
  c.next_owner = c.next;
  return c;
}

}  // namespace

RoutingCounts count_routing(traces::TraceReader& reader, const std::string& trace_sha256) {
  const traces::TraceShape& shape = reader.meta().shape;
  RoutingCounts c = zero_counts(shape, trace_sha256);
  const std::size_t layers = shape.layers.size();
  const auto k = static_cast<std::size_t>(shape.top_k);

  reader.rewind();  // the counts describe the whole trace, whatever was read before
  traces::TokenBlock block;
  while (reader.next(block)) {
    const std::size_t tokens = block.size();
    if (block.experts.size() != tokens * layers * k)
      throw common::RunError("trace reader handed out a block of " + std::to_string(block.experts.size()) +
                             " expert ids for " + std::to_string(tokens) + " tokens (expected " +
                             std::to_string(tokens * layers * k) + ")");
    for (std::size_t t = 0; t < tokens; ++t) count_token(c, block.experts.data() + t * layers * k, c.tokens + t);
    c.tokens += tokens;
  }
  return c;
}

RoutingCounts mix_routing(const std::vector<RoutingCounts>& counts, const std::vector<double>& weights) {
  using common::InputError;
  if (counts.empty()) throw InputError("mix_routing: no routing counts to mix");
  if (!weights.empty() && weights.size() != counts.size())
    throw InputError("mix_routing: " + std::to_string(weights.size()) + " weights for " +
                     std::to_string(counts.size()) + " traces; give one per trace, or none for equal weights");
  const RoutingCounts& first = counts.front();
  double weight_sum = 0.0, token_sum = 0.0;
  bool owner_pairs = true;  // every trace has next_owner
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const RoutingCounts& c = counts[i];
    const std::string which = "mix_routing: trace " + std::to_string(i);
    if (c.layers != first.layers || c.num_experts != first.num_experts || c.top_k != first.top_k)
      throw InputError(which + ": its routing shape (MoE layers, experts, top-k) differs from trace 0's");
    const auto experts = static_cast<std::size_t>(c.num_experts);
    const std::size_t layers = c.layers.size();
    bool sized = c.load.size() == layers && c.next.size() == (layers > 0 ? layers - 1 : 0);
    for (const auto& row : c.load) sized = sized && row.size() == experts;
    for (const auto& row : c.next) sized = sized && row.size() == experts * experts;
    if (!sized) throw InputError(which + ": its load or next counts are not sized layers x experts");
    bool owner_sized = c.next_owner.size() == c.next.size();
    for (const auto& row : c.next_owner) owner_sized = owner_sized && row.size() == experts * experts;
    if (!owner_sized && !c.next_owner.empty())
      throw InputError(which + ": its next_owner counts are not sized like its next counts");
    owner_pairs = owner_pairs && owner_sized;
    if (c.tokens == 0) throw InputError(which + ": the trace has no tokens");
    const double w = weights.empty() ? 1.0 : weights[i];
    if (!std::isfinite(w) || w <= 0.0)
      throw InputError(which + ": expected a positive finite weight, got " + std::to_string(w));
    weight_sum += w;
    token_sum += static_cast<double>(c.tokens);
  }
  if (counts.size() == 1) return first;
  RoutingCounts mix;
  mix.layers = first.layers;
  mix.num_experts = first.num_experts;
  mix.top_k = first.top_k;
  mix.tokens = static_cast<std::uint64_t>(std::llround(token_sum / static_cast<double>(counts.size())));
  const auto experts = static_cast<std::size_t>(first.num_experts);
  mix.load.assign(first.load.size(), std::vector<double>(experts, 0.0));
  mix.next.assign(first.next.size(), std::vector<double>(experts * experts, 0.0));
  if (owner_pairs) mix.next_owner = mix.next;
  // One factor per trace: its share of the weight, per token, back in units of the mean trace.
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const RoutingCounts& c = counts[i];
    const double w = weights.empty() ? 1.0 : weights[i];
    const double factor = (w / weight_sum) * (static_cast<double>(mix.tokens) / static_cast<double>(c.tokens));
    for (std::size_t l = 0; l < c.load.size(); ++l)
      for (std::size_t e = 0; e < c.load[l].size(); ++e) mix.load[l][e] += factor * c.load[l][e];
    for (std::size_t l = 0; l < c.next.size(); ++l)
      for (std::size_t p = 0; p < c.next[l].size(); ++p) mix.next[l][p] += factor * c.next[l][p];
    for (std::size_t l = 0; l < mix.next_owner.size(); ++l)
      for (std::size_t p = 0; p < mix.next_owner[l].size(); ++p) mix.next_owner[l][p] += factor * c.next_owner[l][p];
  }
  return mix;
}

RoutingCounts with_owner_pairs(const RoutingCounts& counts) {
  bool sized = counts.next_owner.size() == counts.next.size();
  for (std::size_t l = 0; sized && l < counts.next.size(); ++l)
    sized = counts.next_owner[l].size() == counts.next[l].size();
  if (!sized)
    throw common::InputError("routing counts: residence dispatch needs the owner pair counts (next_owner), which "
                             "these counts lack; count them from a per-token trace");
  RoutingCounts out = counts;
  out.next = counts.next_owner;
  return out;
}

RoutingCounts count_load_routing(traces::LoadTraceReader& reader, const std::string& trace_sha256) {
  const traces::TraceShape& shape = reader.meta().shape;
  // `next` and `next_owner` left at zero: a load-only trace records no token's experts at two layers, so no pair counts.
  RoutingCounts c = zero_counts(shape, trace_sha256);
  const std::size_t layers = shape.layers.size();
  const auto experts = static_cast<std::size_t>(shape.num_experts);

  reader.rewind();
  std::vector<std::uint32_t> counts;
  while (reader.next(counts)) {
    if (counts.size() != layers * experts)
      throw common::RunError("load trace reader handed out " + std::to_string(counts.size()) + " counts (expected " +
                             std::to_string(layers * experts) + ")");
    for (std::size_t l = 0; l < layers; ++l)
      for (std::size_t e = 0; e < experts; ++e) c.load[l][e] += counts[l * experts + e];
    c.tokens += traces::load_tokens(shape, counts);
  }
  return c;
}

}  // namespace moesim::sim
