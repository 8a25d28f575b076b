// The exflow policy (ExFlow, arXiv:2401.08383, github.com/YJHMITWEB/ExFlow; docs/placement.md, "exflow"):
// every rank holds E / EP experts of each layer (one copy each) and the placement minimises the affinity
// cost of a token's moves between adjacent MoE layers, counts (RoutingCounts::next, or next_owner for
// residence dispatch) times seconds per token between the two ranks (rank_token_cost: 0 on one rank).
#pragma once

#include <vector>

#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "sim/placement/placement.hpp"
#include "sim/placement/routing_counts.hpp"

namespace moesim::sim {

// The minimum-cost assignment of n rows to n columns (Hungarian method, O(n^3)); cost[i * n + j].
// Returns the column of each row. Deterministic: ties go the same way for the same input.
std::vector<int> min_cost_assignment(const std::vector<double>& cost, int n);

// exflow's objective for a placement with one copy per expert, in seconds: sum over adjacent layers l of
// pairs[l][e1 * E + e2] x cost(rank of e1 in l, rank of e2 in l+1); pairs is routing.next (residence:
// routing.next_owner, InputError when not counted).
double exflow_objective(const Placement& placement, const RoutingCounts& routing, const models::Architecture& arch,
                        const models::Cluster& cluster, bool residence);

}  // namespace moesim::sim
