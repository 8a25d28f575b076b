// Cross-layer traffic between EP ranks, shared by the moetuner policies and the evaluation: the cost
// of a token between two ranks, stage-2 problems built from routing counts, and the stage-2 objective
// recomputed from a placement. Traffic is in tokens (routing counts), costs in seconds per token,
// objectives in seconds. A replicated expert's traffic is split evenly over its copies throughout.
#pragma once

#include <cstddef>
#include <vector>

#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "sim/placement/placement.hpp"
#include "sim/placement/routing_counts.hpp"
#include "sim/placement/stage2_problem.hpp"

namespace moesim::sim {

// Seconds per token between EP ranks (rank r = GPUs r*tp .. r*tp+tp-1; a token's bytes are split over
// the tp GPUs): bytes per token / (tp x the GPUs' bandwidth); 0 on the diagonal. [from * ep + to]
std::vector<double> rank_token_cost(const models::Architecture& arch, const models::Cluster& cluster, int ep, int tp);
// The stage-2 problem of stage-1 clusters (clusters[l][e]: expert e's cluster in layer l).
Stage2Problem stage2_problem(const RoutingCounts& routing, const std::vector<std::vector<int>>& clusters,
                             const models::Architecture& arch, const models::Cluster& cluster, int ep, int tp);
// The same for clusters holding copies (moetuner_replicated; clusters[l][e]: the clusters of e's copies).
Stage2Problem stage2_problem_replicated(const RoutingCounts& routing,
                                        const std::vector<std::vector<std::vector<int>>>& clusters,
                                        const models::Architecture& arch, const models::Cluster& cluster, int ep,
                                        int tp);
// Cross-layer traffic between layers l and l+1 by rank pair, [from rank * EP + to rank]: the R
// counts with a replicated expert's share split evenly over its copies.
std::vector<double> cross_layer_rank_traffic(const Placement& placement, const RoutingCounts& routing, std::size_t l);
// The stage-2 objective recomputed from a placement and routing counts: sum over layer pairs of the
// slowest rank pair's seconds.
double placement_traffic_objective(const Placement& placement, const RoutingCounts& routing,
                                   const models::Architecture& arch, const models::Cluster& cluster);

}  // namespace moesim::sim
