#include "sim/engine/routing.hpp"

#include <algorithm>
#include <bit>

#include "sim/placement/routing_rule.hpp"

namespace moesim::sim {

namespace {

void reset_counts(std::vector<std::vector<long>>& v, std::size_t outer, std::size_t inner) {
  if (v.size() < outer) v.resize(outer);
  for (std::size_t i = 0; i < outer; ++i) v[i].assign(inner, 0);
}

// The kernel of single-holder layers on at most 8 ranks, kept out of line so that its loop holds its
// state in registers: per token, count (rank, expert) in its chunk's table and its set of
// destination ranks per home. slot[e] = holder * E + e, bit[e] = 1 << holder.
[[gnu::noinline]] void count_single_holders(const std::uint16_t* ids, std::size_t n, std::size_t k, const int* home,
                                            const std::uint8_t* chunk, const std::int32_t* slot,
                                            const std::uint8_t* bit, long* const* tokens, long* const* sets,
                                            int set_bits) {
  for (std::size_t i = 0; i < n; ++i, ids += k) {
    const std::size_t c = chunk[i];
    long* t = tokens[c];
    unsigned ranks = 0;
    for (std::size_t j = 0; j < k; ++j) {
      ++t[slot[ids[j]]];
      ranks |= bit[ids[j]];
    }
    ++sets[c][(static_cast<std::size_t>(home[i]) << set_bits) + ranks];
  }
}

}  // namespace

void LayerCounts::reset(int ranks, int num_experts, int num_nodes, int num_chunks) {
  ep = ranks;
  experts = num_experts;
  nodes = num_nodes;
  chunks = num_chunks;
  const auto C = static_cast<std::size_t>(num_chunks);
  reset_counts(sends, C, static_cast<std::size_t>(ep * ep));
  reset_counts(expert_tokens, C, static_cast<std::size_t>(ep * experts));
  reset_counts(node_sends, C, static_cast<std::size_t>(ep * nodes));
}

void token_chunks(std::span<const int> home, std::span<const long> home_count, int chunks, std::vector<std::uint8_t>& out) {
  out.assign(home.size(), 0);
  if (chunks <= 1) return;
  std::vector<long> seen(home_count.size(), 0), q(home_count.size(), 0);
  for (std::size_t i = 0; i < home.size(); ++i) {
    const auto h = static_cast<std::size_t>(home[i]);
    // chunk = position * chunks / count, kept as a running quotient (no division per token).
    const long scaled = seen[h]++ * chunks;
    while (scaled >= (q[h] + 1) * home_count[h]) ++q[h];
    out[i] = static_cast<std::uint8_t>(q[h]);
  }
}

LayerRouter::LayerRouter(const Placement& placement, std::vector<int> rank_node, int experts, int top_k)
    : placement_(placement), rank_node_(std::move(rank_node)), ep_(static_cast<int>(rank_node_.size())),
      experts_(experts), top_k_(top_k), nodes_(0) {
  for (int n : rank_node_) nodes_ = std::max(nodes_, n + 1);
  const auto E = static_cast<std::size_t>(experts);
  const std::size_t layers = placement.ranks.size();
  single_holder_.assign(layers * E, -1);
  for (std::size_t l = 0; l < layers; ++l)
    for (std::size_t e = 0; e < E && e < placement.ranks[l].size(); ++e)
      if (placement.ranks[l][e].size() == 1) single_holder_[l * E + e] = placement.ranks[l][e][0];
  all_single_.assign(layers, 0);
  holder_slot_.assign(layers * E, 0);
  holder_bit_.assign(layers * E, 0);
  if (ep_ > kMaskRanks || E == 0) return;
  for (std::size_t l = 0; l < layers; ++l) {
    bool all = true;
    for (std::size_t e = 0; e < E; ++e) {
      const int r = single_holder_[l * E + e];
      if (r < 0) {
        all = false;
        continue;
      }
      holder_slot_[l * E + e] = static_cast<std::int32_t>(static_cast<std::size_t>(r) * E + e);
      holder_bit_[l * E + e] = static_cast<std::uint8_t>(1u << r);
    }
    all_single_[l] = all ? 1 : 0;
  }
}

int LayerRouter::chosen(std::size_t layer, std::uint16_t expert, int home, std::uint64_t token_index) const {
  const int single = single_holder_[layer * static_cast<std::size_t>(experts_) + expert];
  if (single >= 0) return single;
  return replica_for(placement_.ranks[layer][expert], home, token_index, rank_node_);
}

void LayerRouter::count_pairs(std::size_t layer, const LayerTokens& tokens, LayerCounts& out) const {
  reset_counts(out.pair_sends, static_cast<std::size_t>(out.chunks), static_cast<std::size_t>(ep_ * ep_));
  const auto k = static_cast<std::size_t>(top_k_);
  for (std::size_t i = 0; i < tokens.home.size(); ++i) {
    const int h = tokens.home[i];
    long* row = out.pair_sends[tokens.chunk[i]].data() + static_cast<std::size_t>(h) * static_cast<std::size_t>(ep_);
    for (std::size_t j = 0; j < k; ++j) ++row[chosen(layer, tokens.ids[i * k + j], h, tokens.token_index[i])];
  }
}

void LayerRouter::route(std::size_t layer, const LayerTokens& tokens, int chunks, LayerCounts& out) {
  out.reset(ep_, experts_, nodes_, chunks);
  if (ep_ <= kMaskRanks) {
    reset_counts(mask_counts_, static_cast<std::size_t>(out.chunks), static_cast<std::size_t>(ep_) << kMaskRanks);
    if (layer < all_single_.size() && all_single_[layer])
      route_single_holders(layer, tokens, out);
    else
      route_small(layer, tokens, out);
    expand_sets(out);
  } else if (ep_ <= 64) {
    route_bitset(layer, tokens, out);
  } else {
    route_marks(layer, tokens, out);
  }
}

void LayerRouter::route_single_holders(std::size_t layer, const LayerTokens& tokens, LayerCounts& out) {
  const auto C = static_cast<std::size_t>(out.chunks);
  chunk_rows_.resize(C);
  chunk_sets_.resize(C);
  for (std::size_t c = 0; c < C; ++c) {
    chunk_rows_[c] = out.expert_tokens[c].data();
    chunk_sets_[c] = mask_counts_[c].data();
  }
  const std::size_t off = layer * static_cast<std::size_t>(experts_);
  count_single_holders(tokens.ids, tokens.home.size(), static_cast<std::size_t>(top_k_), tokens.home.data(),
                       tokens.chunk.data(), holder_slot_.data() + off, holder_bit_.data() + off, chunk_rows_.data(),
                       chunk_sets_.data(), kMaskRanks);
}

// Up to 8 ranks with replicated experts: each token's set of destination ranks, counted whole.
void LayerRouter::route_small(std::size_t layer, const LayerTokens& tokens, LayerCounts& out) {
  const auto k = static_cast<std::size_t>(top_k_);
  for (std::size_t i = 0; i < tokens.home.size(); ++i) {
    const int h = tokens.home[i];
    const std::size_t c = tokens.chunk[i];
    const std::uint16_t* e = tokens.ids + i * k;
    long* tokens_c = out.expert_tokens[c].data();
    unsigned ranks = 0;
    for (std::size_t j = 0; j < k; ++j) {
      const int r = chosen(layer, e[j], h, tokens.token_index[i]);
      ++tokens_c[r * experts_ + e[j]];
      ranks |= 1u << r;
    }
    ++mask_counts_[c][(static_cast<std::size_t>(h) << kMaskRanks) + ranks];
  }
}

// Each home's destination sets turned into sends: a token goes once to every rank of its set and,
// for hierarchical dispatch, once to every other node the set reaches.
void LayerRouter::expand_sets(LayerCounts& out) const {
  for (std::size_t c = 0; c < static_cast<std::size_t>(out.chunks); ++c)
    for (int h = 0; h < ep_; ++h) {
      const long* counts = mask_counts_[c].data() + (static_cast<std::size_t>(h) << kMaskRanks);
      long* sends_row = out.sends[c].data() + static_cast<std::size_t>(h) * static_cast<std::size_t>(ep_);
      const int home_node = rank_node_[static_cast<std::size_t>(h)];
      for (unsigned set = 1; set < (1u << ep_); ++set) {
        const long n = counts[set];
        if (n == 0) continue;
        std::uint64_t far_nodes = 0;
        for (unsigned rest = set; rest != 0; rest &= rest - 1) {
          const int r = std::countr_zero(rest);
          sends_row[r] += n;
          const int rn = rank_node_[static_cast<std::size_t>(r)];
          if (rn != home_node) far_nodes |= std::uint64_t{1} << rn;
        }
        for (; far_nodes != 0; far_nodes &= far_nodes - 1)
          out.node_sends[c][static_cast<std::size_t>(h * nodes_ + std::countr_zero(far_nodes))] += n;
      }
    }
}

// Up to 64 ranks: destination ranks as a bit set, one OR per expert, then one pass over the set bits.
void LayerRouter::route_bitset(std::size_t layer, const LayerTokens& tokens, LayerCounts& out) {
  const auto k = static_cast<std::size_t>(top_k_);
  for (std::size_t i = 0; i < tokens.home.size(); ++i) {
    const int h = tokens.home[i];
    const std::size_t c = tokens.chunk[i];
    const std::uint16_t* e = tokens.ids + i * k;
    long* tokens_c = out.expert_tokens[c].data();
    std::uint64_t ranks = 0;
    for (std::size_t j = 0; j < k; ++j) {
      const int r = chosen(layer, e[j], h, tokens.token_index[i]);
      ++tokens_c[r * experts_ + e[j]];
      ranks |= std::uint64_t{1} << r;
    }
    long* sends_row = out.sends[c].data() + static_cast<std::size_t>(h) * static_cast<std::size_t>(ep_);
    const int home_node = rank_node_[static_cast<std::size_t>(h)];
    std::uint64_t far_nodes = 0;
    while (ranks != 0) {
      const int r = std::countr_zero(ranks);
      ranks &= ranks - 1;
      ++sends_row[r];
      const int n = rank_node_[static_cast<std::size_t>(r)];
      if (n != home_node) far_nodes |= std::uint64_t{1} << n;
    }
    while (far_nodes != 0) {
      const int n = std::countr_zero(far_nodes);
      far_nodes &= far_nodes - 1;
      ++out.node_sends[c][static_cast<std::size_t>(h * nodes_ + n)];
    }
  }
}

// Beyond 64 ranks: membership marks (rank r is in the token's set when its stamp equals the tick),
// one increment per token instead of a search per expert.
void LayerRouter::route_marks(std::size_t layer, const LayerTokens& tokens, LayerCounts& out) {
  const auto k = static_cast<std::size_t>(top_k_);
  if (rank_stamp_.size() != static_cast<std::size_t>(ep_)) rank_stamp_.assign(static_cast<std::size_t>(ep_), 0);
  if (node_stamp_.size() != static_cast<std::size_t>(nodes_)) node_stamp_.assign(static_cast<std::size_t>(nodes_), 0);
  for (std::size_t i = 0; i < tokens.home.size(); ++i) {
    const int h = tokens.home[i];
    const std::size_t c = tokens.chunk[i];
    const std::uint16_t* e = tokens.ids + i * k;
    if (++tick_ == 0) {  // wrapped: clear the marks of 2^32 tokens ago
      std::fill(rank_stamp_.begin(), rank_stamp_.end(), 0);
      std::fill(node_stamp_.begin(), node_stamp_.end(), 0);
      tick_ = 1;
    }
    dests_.clear();
    long* tokens_c = out.expert_tokens[c].data();
    for (std::size_t j = 0; j < k; ++j) {
      const int r = chosen(layer, e[j], h, tokens.token_index[i]);
      ++tokens_c[r * experts_ + e[j]];
      if (rank_stamp_[static_cast<std::size_t>(r)] != tick_) {
        rank_stamp_[static_cast<std::size_t>(r)] = tick_;
        dests_.push_back(r);
      }
    }
    long* sends_row = out.sends[c].data() + static_cast<std::size_t>(h) * static_cast<std::size_t>(ep_);
    const int home_node = rank_node_[static_cast<std::size_t>(h)];
    for (int r : dests_) {
      ++sends_row[r];
      const int n = rank_node_[static_cast<std::size_t>(r)];
      if (n != home_node && node_stamp_[static_cast<std::size_t>(n)] != tick_) {
        node_stamp_[static_cast<std::size_t>(n)] = tick_;
        ++out.node_sends[c][static_cast<std::size_t>(h * nodes_ + n)];
      }
    }
  }
}

void route_layer_reference(const Placement& placement, std::span<const int> rank_node, std::size_t layer, int experts,
                           int top_k, const LayerTokens& tokens, int chunks, LayerCounts& out) {
  const int ep = static_cast<int>(rank_node.size());
  int nodes = 0;
  for (int n : rank_node) nodes = std::max(nodes, n + 1);
  out.reset(ep, experts, nodes, chunks);
  reset_counts(out.pair_sends, static_cast<std::size_t>(chunks), static_cast<std::size_t>(ep * ep));
  for (std::size_t i = 0; i < tokens.home.size(); ++i) {
    const int h = tokens.home[i];
    const std::size_t c = tokens.chunk[i];
    std::vector<int> ranks, far_nodes;
    for (int j = 0; j < top_k; ++j) {
      const std::uint16_t e = tokens.ids[i * static_cast<std::size_t>(top_k) + static_cast<std::size_t>(j)];
      const int r = replica_for(placement.ranks[layer][e], h, tokens.token_index[i], rank_node);
      ++out.expert_tokens[c][static_cast<std::size_t>(r * experts + e)];
      ++out.pair_sends[c][static_cast<std::size_t>(h * ep + r)];
      if (std::find(ranks.begin(), ranks.end(), r) == ranks.end()) ranks.push_back(r);
    }
    for (int r : ranks) {
      ++out.sends[c][static_cast<std::size_t>(h * ep + r)];
      const int n = rank_node[static_cast<std::size_t>(r)];
      if (n != rank_node[static_cast<std::size_t>(h)] && std::find(far_nodes.begin(), far_nodes.end(), n) == far_nodes.end())
        far_nodes.push_back(n);
    }
    for (int n : far_nodes) ++out.node_sends[c][static_cast<std::size_t>(h * nodes + n)];
  }
}

void route_residence_layer(const Placement& placement, std::span<const int> rank_node, std::size_t layer, int experts,
                           int top_k, const LayerTokens& tokens, int chunks, LayerCounts& out, std::vector<int>& owner) {
  const int ep = static_cast<int>(rank_node.size());
  int nodes = 0;
  for (int n : rank_node) nodes = std::max(nodes, n + 1);
  out.reset(ep, experts, nodes, chunks);
  reset_counts(out.returns, static_cast<std::size_t>(chunks), static_cast<std::size_t>(ep * ep));
  owner.assign(tokens.home.size(), 0);
  const auto k = static_cast<std::size_t>(top_k);
  std::vector<int> ranks(k), dests;
  std::vector<std::uint32_t> node_seen(static_cast<std::size_t>(nodes), 0);
  for (std::size_t i = 0; i < tokens.home.size(); ++i) {
    const int h = tokens.home[i];
    const std::size_t c = tokens.chunk[i];
    for (std::size_t j = 0; j < k; ++j) {
      const std::uint16_t e = tokens.ids[i * k + j];
      ranks[j] = replica_for(placement.ranks[layer][e], h, tokens.token_index[i], rank_node);
      ++out.expert_tokens[c][static_cast<std::size_t>(ranks[j] * experts + e)];
    }
    dests.clear();
    for (int r : ranks)
      if (std::find(dests.begin(), dests.end(), r) == dests.end()) dests.push_back(r);
    const int o = owner_rank(ranks);
    owner[i] = o;
    const int home_node = rank_node[static_cast<std::size_t>(h)];
    const auto stamp = static_cast<std::uint32_t>(i + 1);
    for (int r : dests) {
      ++out.sends[c][static_cast<std::size_t>(h * ep + r)];
      const int n = rank_node[static_cast<std::size_t>(r)];
      if (n != home_node && node_seen[static_cast<std::size_t>(n)] != stamp) {
        node_seen[static_cast<std::size_t>(n)] = stamp;
        ++out.node_sends[c][static_cast<std::size_t>(h * nodes + n)];
      }
      if (r != o) ++out.returns[c][static_cast<std::size_t>(r * ep + o)];
    }
  }
}

}  // namespace moesim::sim
