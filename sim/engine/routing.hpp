// Routing one MoE layer of a step into counts (docs/simulator.md, "Routing"): every token is sent
// once to each EP rank that holds one of its top-k experts (the copy replica_for chooses), in the
// chunk its position among its home rank's tokens puts it in. LayerRouter::route is the fast
// version (kernels for single-holder layers and small EP groups); route_layer_reference is the plain
// one, and a test holds them equal. No SimGrid here.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sim/placement/placement.hpp"

namespace moesim::sim {

// What one layer's routing produces, per chunk c (ranks h, r; node n; expert e).
struct LayerCounts {
  int ep = 0, experts = 0, nodes = 0, chunks = 0;
  std::vector<std::vector<long>> sends;          // [c][h * ep + r]: tokens home rank h sends to rank r
  std::vector<std::vector<long>> expert_tokens;  // [c][r * experts + e]: tokens expert e gets on rank r
  // [c][h * nodes + n]: tokens home rank h sends to node n (each token once per node it reaches),
  // counted for nodes other than h's own: what hierarchical dispatch moves between nodes.
  std::vector<std::vector<long>> node_sends;
  // [c][h * ep + r]: (token, expert) pairs home rank h sends to rank r, one copy per expert (what
  // low-latency dispatch moves); filled only by LayerRouter::count_pairs, empty otherwise.
  std::vector<std::vector<long>> pair_sends;
  // [c][r * ep + o]: tokens rank r returns to rank o in the combine when o is not their home
  // (residence dispatch: to their owner rank); filled only by route_residence_layer.
  std::vector<std::vector<long>> returns;
  void reset(int ep, int experts, int nodes, int chunks);
  long send(std::size_t c, int h, int r) const { return sends[c][static_cast<std::size_t>(h * ep + r)]; }
  long node_send(std::size_t c, int h, int n) const { return node_sends[c][static_cast<std::size_t>(h * nodes + n)]; }
  long pair_send(std::size_t c, int h, int r) const { return pair_sends[c][static_cast<std::size_t>(h * ep + r)]; }
  long returned(std::size_t c, int r, int o) const { return returns[c][static_cast<std::size_t>(r * ep + o)]; }
};

// One layer's tokens: their expert ids [token][k] for this layer, homes, stream indices (for the
// replica choice) and chunks.
struct LayerTokens {
  const std::uint16_t* ids = nullptr;
  std::span<const int> home;
  std::span<const std::uint64_t> token_index;
  std::span<const std::uint8_t> chunk;
};

// Each token's chunk: its position p among the n tokens of its home rank, chunk = p * chunks / n.
void token_chunks(std::span<const int> home, std::span<const long> home_count, int chunks, std::vector<std::uint8_t>& out);

class LayerRouter {
 public:
  // `rank_node[r]`: the node of EP rank r.
  LayerRouter(const Placement& placement, std::vector<int> rank_node, int experts, int top_k);
  // `chunks`: the chunk count (every token's chunk below it).
  void route(std::size_t layer, const LayerTokens& tokens, int chunks, LayerCounts& out);
  // After route() on the same tokens: fills out.pair_sends (each token once per expert it chose,
  // to the replica the routing rule picks).
  void count_pairs(std::size_t layer, const LayerTokens& tokens, LayerCounts& out) const;
  const Placement& placement() const { return placement_; }

 private:
  static constexpr int kMaskRanks = 8;  // up to this many EP ranks, a token's destination set is counted whole
  void route_single_holders(std::size_t layer, const LayerTokens& tokens, LayerCounts& out);
  void route_small(std::size_t layer, const LayerTokens& tokens, LayerCounts& out);
  void route_bitset(std::size_t layer, const LayerTokens& tokens, LayerCounts& out);
  void route_marks(std::size_t layer, const LayerTokens& tokens, LayerCounts& out);
  void expand_sets(LayerCounts& out) const;
  int chosen(std::size_t layer, std::uint16_t expert, int home, std::uint64_t token_index) const;

  const Placement& placement_;
  std::vector<int> rank_node_;
  int ep_, experts_, top_k_, nodes_;
  std::vector<int> single_holder_;  // [layer * E + expert]: its only holder rank, -1 if replicated
  // Per layer whether every expert has one holder; per (layer, expert) holder * E + expert and the
  // holder's bit (EP ranks <= kMaskRanks).
  std::vector<char> all_single_;
  std::vector<std::int32_t> holder_slot_;
  std::vector<std::uint8_t> holder_bit_;
  // Scratch kept across layers and steps: routing allocates only while arrays grow.
  std::vector<std::vector<long>> mask_counts_;  // [c][(h << kMaskRanks) + set of destination ranks]
  std::vector<long*> chunk_rows_, chunk_sets_;
  std::vector<std::uint32_t> rank_stamp_, node_stamp_;
  std::vector<int> dests_;
  std::uint32_t tick_ = 0;
};

// The plain rule, token by token (what LayerRouter::route must equal).
void route_layer_reference(const Placement& placement, std::span<const int> rank_node, std::size_t layer, int experts,
                           int top_k, const LayerTokens& tokens, int chunks, LayerCounts& out);

// Residence dispatch (docs/simulator.md, "Residence dispatch"): each token starts the layer on its
// residence rank (tokens.home) and goes once to every rank that holds one of its experts (the copy
// replica_for picks, read with the residence rank as home), as route() counts; after the layer it
// lives on its owner rank (owner_rank over the ranks that ran its experts), to which every other of
// those ranks returns its partial output. Fills out's sends, expert_tokens, node_sends and returns
// (out.returns[c][r * ep + o]), and `owner` (per token). Token by token: no kernel of route()'s.
void route_residence_layer(const Placement& placement, std::span<const int> rank_node, std::size_t layer, int experts,
                           int top_k, const LayerTokens& tokens, int chunks, LayerCounts& out, std::vector<int>& owner);

}  // namespace moesim::sim
