#include "sim/placement/routing_counts.hpp"

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
  }
}

}  // namespace

RoutingCounts count_routing(traces::TraceReader& reader, const std::string& trace_sha256) {
  const traces::TraceShape& shape = reader.meta().shape;
  RoutingCounts c;
  c.layers = shape.layers;
  c.num_experts = shape.num_experts;
  c.top_k = shape.top_k;
  c.trace_sha256 = trace_sha256;
  const std::size_t layers = shape.layers.size();
  const auto experts = static_cast<std::size_t>(shape.num_experts);
  const auto k = static_cast<std::size_t>(shape.top_k);
  c.load.assign(layers, std::vector<double>(experts, 0.0));
  c.next.assign(layers > 0 ? layers - 1 : 0, std::vector<double>(experts * experts, 0.0));

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

RoutingCounts count_load_routing(traces::LoadTraceReader& reader, const std::string& trace_sha256) {
  const traces::TraceShape& shape = reader.meta().shape;
  RoutingCounts c;
  c.layers = shape.layers;
  c.num_experts = shape.num_experts;
  c.top_k = shape.top_k;
  c.trace_sha256 = trace_sha256;
  const std::size_t layers = shape.layers.size();
  const auto experts = static_cast<std::size_t>(shape.num_experts);
  c.load.assign(layers, std::vector<double>(experts, 0.0));
  // Left at zero: a load-only trace records no token's experts at two layers, so no pair counts.
  c.next.assign(layers > 0 ? layers - 1 : 0, std::vector<double>(experts * experts, 0.0));

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
