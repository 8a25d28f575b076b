// The routing rules every part of moesim shares (docs/simulator.md, "Routing"): the engine when it
// replays a trace, placement evaluation on held-out traffic, and any estimator. One home, so that
// what is scored, estimated and simulated is the same routing.
//   Home: sequence i of a trace (in trace order, counting on across repetitions) lives on
//   data-parallel rank i mod DP; its tokens start there and their results return there.
//   Replica: a token routed to an expert with several copies uses the copy on its home rank, else a
//   copy on its home rank's node (the (t mod n)-th of the n there, t the token's index in the trace
//   stream), else the (t mod c)-th of all c copies, in the order the placement lists them.
//   Residence (dispatch.mode residence, docs/simulator.md, "Residence dispatch"): a token starts a step
//   on its home rank; after each MoE layer it lives on that layer's owner rank (owner_rank), and the
//   next layer's dispatch starts there, with the replica rule above read with the residence rank in
//   place of the home rank.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/cluster.hpp"

namespace moesim::sim {

inline int home_rank(std::uint64_t sequence_ordinal, int dp) {
  return static_cast<int>(sequence_ordinal % static_cast<std::uint64_t>(dp));
}

// The node of each EP rank (rank r holds GPUs r*tp .. r*tp+tp-1, a TP group inside one node).
std::vector<int> rank_nodes(const models::Cluster& cluster, int ep, int tp);

// The copy of an expert (held by `holders`, at least one rank) that a token from `home` with stream
// index `token_index` uses; `rank_node[r]` is the node of rank r.
inline int replica_for(std::span<const int> holders, int home, std::uint64_t token_index, std::span<const int> rank_node) {
  if (holders.size() == 1) return holders[0];
  for (int r : holders)
    if (r == home) return r;
  const int home_node = rank_node[static_cast<std::size_t>(home)];
  std::size_t same_node = 0;
  for (int r : holders) same_node += rank_node[static_cast<std::size_t>(r)] == home_node ? 1 : 0;
  if (same_node > 0) {
    std::size_t pick = token_index % same_node;
    for (int r : holders)
      if (rank_node[static_cast<std::size_t>(r)] == home_node && pick-- == 0) return r;
  }
  return holders[token_index % holders.size()];
}

// The owner of a token after a MoE layer in residence mode: of the ranks that ran its top-k experts
// (`expert_ranks`, the copies chosen, in the token's top-k order: highest gate weight first), the one
// that ran the most of them; ties go to the rank of its highest-ranked expert among the tied. For top-1
// this is its expert's rank. The other ranks send their partial outputs there (the combine).
inline int owner_rank(std::span<const int> expert_ranks) {
  int best = -1, best_count = 0;
  for (std::size_t j = 0; j < expert_ranks.size(); ++j) {
    int count = 0;
    for (int r : expert_ranks) count += r == expert_ranks[j] ? 1 : 0;
    if (count > best_count) {
      best = expert_ranks[j];
      best_count = count;
    }
  }
  return best;
}

}  // namespace moesim::sim
