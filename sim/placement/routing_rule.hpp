// The routing rules every part of moesim shares (docs/simulator.md, "Routing"): the engine when it
// replays a trace, placement evaluation on held-out traffic, and any estimator. One home, so that
// what is scored, estimated and simulated is the same routing.
//   Home: sequence i of a trace (in trace order, counting on across repetitions) lives on
//   data-parallel rank i mod DP; its tokens start there and their results return there.
//   Replica: a token routed to an expert with several copies uses the copy on its home rank, else a
//   copy on its home rank's node (the (t mod n)-th of the n there, t the token's index in the trace
//   stream), else the (t mod c)-th of all c copies, in the order the placement lists them.
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

}  // namespace moesim::sim
