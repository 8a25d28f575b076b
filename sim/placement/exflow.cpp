// The exflow policy: ExFlow's affinity placement (arXiv:2401.08383) solved layer by layer. The paper's
// ILP (Gurobi, recursive bipartitioning, one binary per token and layer pair) is out of reach for GLPK
// at DeepSeek-V3's size; a layer's experts given the layers around it are an assignment problem, solved
// exactly, so a chain of such solves converges to a placement no single layer's move improves.
#include "sim/placement/exflow.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "common/error.hpp"
#include "sim/placement/builtin_policies.hpp"
#include "sim/placement/routing_rule.hpp"
#include "sim/placement/traffic.hpp"

namespace moesim::sim {

std::vector<int> min_cost_assignment(const std::vector<double>& cost, int n) {
  // The shortest-augmenting-path form of the Hungarian method: rows join one at a time; u, v are the
  // dual potentials (u[i] + v[j] <= cost), p[j] the row on column j, column 0 the row being added.
  const double inf = std::numeric_limits<double>::infinity();
  const auto N = static_cast<std::size_t>(n);
  std::vector<double> u(N + 1, 0.0), v(N + 1, 0.0), minv(N + 1);
  std::vector<std::size_t> p(N + 1, 0), way(N + 1, 0);
  std::vector<char> used(N + 1);
  for (std::size_t i = 1; i <= N; ++i) {
    p[0] = i;
    std::size_t j0 = 0;
    std::fill(minv.begin(), minv.end(), inf);
    std::fill(used.begin(), used.end(), 0);
    do {
      used[j0] = 1;
      const std::size_t i0 = p[j0];
      const double* row = cost.data() + (i0 - 1) * N;
      double delta = inf;
      std::size_t j1 = 0;
      for (std::size_t j = 1; j <= N; ++j) {
        if (used[j]) continue;
        const double reduced = row[j - 1] - u[i0] - v[j];
        if (reduced < minv[j]) minv[j] = reduced, way[j] = j0;
        if (minv[j] < delta) delta = minv[j], j1 = j;
      }
      if (j1 == 0) throw common::RunError("min_cost_assignment: a cost is not finite");
      for (std::size_t j = 0; j <= N; ++j) {
        if (used[j])
          u[p[j]] += delta, v[j] -= delta;
        else
          minv[j] -= delta;
      }
      j0 = j1;
    } while (p[j0] != 0);
    do {  // flip the augmenting path back to the root
      const std::size_t j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0 != 0);
  }
  std::vector<int> column(N, 0);
  for (std::size_t j = 1; j <= N; ++j) column[p[j] - 1] = static_cast<int>(j - 1);
  return column;
}

namespace {

using Pairs = std::vector<std::vector<double>>;

// The pair counts exflow weighs: next, or next_owner under residence dispatch.
const Pairs& affinity_pairs(const RoutingCounts& routing, bool residence) {
  if (!residence) return routing.next;
  bool sized = routing.next_owner.size() == routing.next.size();
  for (std::size_t l = 0; sized && l < routing.next.size(); ++l)
    sized = routing.next_owner[l].size() == routing.next[l].size();
  if (!sized)
    throw common::InputError(
        "placement policy exflow: residence dispatch needs the owner pair counts "
        "(next_owner), which these routing counts lack");
  return routing.next_owner;
}

// Seconds of the transitions between layers l and l+1 for ranks rank[l][e], cost[g1 * G + g2].
double transition_cost(const std::vector<std::vector<int>>& rank, const Pairs& pairs, const std::vector<double>& cost,
                       std::size_t l, std::size_t E, std::size_t G) {
  double total = 0.0;
  for (std::size_t e1 = 0; e1 < E; ++e1) {
    const double* row = pairs[l].data() + e1 * E;
    const double* from = cost.data() + static_cast<std::size_t>(rank[l][e1]) * G;
    for (std::size_t e2 = 0; e2 < E; ++e2)
      if (row[e2] != 0.0) total += row[e2] * from[rank[l + 1][e2]];
  }
  return total;
}

double total_cost(const std::vector<std::vector<int>>& rank, const Pairs& pairs, const std::vector<double>& cost,
                  std::size_t E, std::size_t G) {
  double total = 0.0;
  for (std::size_t l = 0; l + 1 < rank.size() && l < pairs.size(); ++l)
    total += transition_cost(rank, pairs, cost, l, E, G);
  return total;
}

// Seconds of putting expert e of layer l on rank g, [e * G + g], given the ranks of layer l-1 (when
// `with_prev`) and of layer l+1 (when `with_next`). The tokens of a neighbour's experts are first summed
// per rank, so that a term costs O(E^2 + E G^2) rather than O(E^2 G).
std::vector<double> layer_costs(const std::vector<std::vector<int>>& rank, const Pairs& pairs,
                                const std::vector<double>& cost, std::size_t l, std::size_t E, std::size_t G,
                                bool with_prev, bool with_next) {
  std::vector<double> out(E * G, 0.0), per_rank(E * G);
  if (with_prev && l > 0) {
    std::fill(per_rank.begin(), per_rank.end(), 0.0);  // [e * G + g1]: tokens from rank g1 to expert e
    for (std::size_t e1 = 0; e1 < E; ++e1) {
      const auto g1 = static_cast<std::size_t>(rank[l - 1][e1]);
      const double* row = pairs[l - 1].data() + e1 * E;
      for (std::size_t e = 0; e < E; ++e) per_rank[e * G + g1] += row[e];
    }
    for (std::size_t e = 0; e < E; ++e)
      for (std::size_t g1 = 0; g1 < G; ++g1) {
        const double tokens = per_rank[e * G + g1];
        if (tokens == 0.0) continue;
        for (std::size_t g = 0; g < G; ++g) out[e * G + g] += tokens * cost[g1 * G + g];
      }
  }
  if (with_next && l + 1 < rank.size()) {
    std::fill(per_rank.begin(), per_rank.end(), 0.0);  // [e * G + g2]: tokens from expert e to rank g2
    for (std::size_t e = 0; e < E; ++e) {
      const double* row = pairs[l].data() + e * E;
      for (std::size_t e2 = 0; e2 < E; ++e2) per_rank[e * G + static_cast<std::size_t>(rank[l + 1][e2])] += row[e2];
    }
    for (std::size_t e = 0; e < E; ++e)
      for (std::size_t g2 = 0; g2 < G; ++g2) {
        const double tokens = per_rank[e * G + g2];
        if (tokens == 0.0) continue;
        for (std::size_t g = 0; g < G; ++g) out[e * G + g] += tokens * cost[g * G + g2];
      }
  }
  return out;
}

// The best ranks for layer l's experts given `costs` (layer_costs), every rank E / G slots: the
// assignment problem of experts onto slots, slot j on rank j / (E / G). Returns the ranks and their cost.
std::pair<std::vector<int>, double> solve_layer(const std::vector<double>& costs, std::size_t E, std::size_t G) {
  const std::size_t slots = E / G;
  std::vector<double> matrix(E * E);
  for (std::size_t e = 0; e < E; ++e)
    for (std::size_t j = 0; j < E; ++j) matrix[e * E + j] = costs[e * G + j / slots];
  const std::vector<int> slot = min_cost_assignment(matrix, static_cast<int>(E));
  std::vector<int> ranks(E);
  double total = 0.0;
  for (std::size_t e = 0; e < E; ++e) {
    ranks[e] = static_cast<int>(static_cast<std::size_t>(slot[e]) / slots);
    total += costs[e * G + static_cast<std::size_t>(ranks[e])];
  }
  return {ranks, total};
}

double layer_cost_of(const std::vector<double>& costs, const std::vector<int>& ranks, std::size_t G) {
  double total = 0.0;
  for (std::size_t e = 0; e < ranks.size(); ++e) total += costs[e * G + static_cast<std::size_t>(ranks[e])];
  return total;
}

class ExflowPolicy final : public PlacementPolicy {
 public:
  std::string name() const override { return "exflow"; }
  bool needs_routing() const override { return true; }
  bool needs_pairs() const override { return true; }
  Placement place(const PlacementInput& input) const override;
};

Placement ExflowPolicy::place(const PlacementInput& input) const {
  const auto t0 = std::chrono::steady_clock::now();
  Placement p = detail::placement_skeleton(input, name(), true);
  const auto E = static_cast<std::size_t>(input.arch.num_experts);
  const auto G = static_cast<std::size_t>(input.ep);
  if (E % G != 0)
    throw common::InputError("placement policy exflow: " + std::to_string(E) + " experts per layer do not divide " +
                             "evenly over " + std::to_string(G) + " EP ranks (exflow gives every rank E / EP " +
                             "experts of each layer, without copies); choose an --ep that divides " +
                             std::to_string(E));
  const Pairs& pairs = affinity_pairs(*input.routing, input.options.residence);
  const std::vector<double> cost = rank_token_cost(input.arch, input.cluster, input.ep, input.tp);
  const std::size_t L = p.ranks.size();
  const std::size_t slots = E / G;

  // Layer 0 contiguous (any start will do: the sweeps may move it), then each layer the best given the
  // one before it.
  std::vector<std::vector<int>> rank(L, std::vector<int>(E));
  for (std::size_t e = 0; e < E; ++e) rank[0][e] = static_cast<int>(e / slots);
  for (std::size_t l = 1; l < L; ++l) rank[l] = rank[0];
  const double contiguous = total_cost(rank, pairs, cost, E, G);
  for (std::size_t l = 1; l < L && l - 1 < pairs.size(); ++l)
    rank[l] = solve_layer(layer_costs(rank, pairs, cost, l, E, G, true, false), E, G).first;
  const double forward = total_cost(rank, pairs, cost, E, G);

  // Sweeps: each layer re-solved given both neighbours, kept only when strictly cheaper, so the
  // objective falls at every kept move and the loop ends; a sweep that keeps none is a fixed point.
  // A layer whose neighbours have not moved since it was last solved would come out the same, so it
  // is skipped (`stale`: a neighbour moved since). One layer at a time reaches a local optimum only,
  // and the forward pass can lead to a worse one than the contiguous layout (a chain of layers that
  // each fit the one before drifts from the layouts later layers prefer): the sweeps run from both
  // starts, and the cheaper end wins (ties: the forward pass).
  constexpr int kMaxSweeps = 50;
  int sweeps = 0, kept = 0, solves = 0;
  auto improve = [&](std::vector<std::vector<int>>& at) {
    bool done = L < 2;
    std::vector<char> stale(L, 1);
    int rounds = 0;
    while (!done && rounds < kMaxSweeps) {
      ++rounds;
      int kept_now = 0;
      for (std::size_t l = 0; l < L; ++l) {
        if (!stale[l]) continue;
        stale[l] = 0;
        ++solves;
        const std::vector<double> costs = layer_costs(at, pairs, cost, l, E, G, true, true);
        const double current = layer_cost_of(costs, at[l], G);
        auto [better, value] = solve_layer(costs, E, G);
        if (value < current - 1e-12 * std::max(1e-12, current)) {
          at[l] = std::move(better);
          ++kept_now;
          if (l > 0) stale[l - 1] = 1;
          if (l + 1 < L) stale[l + 1] = 1;
        }
      }
      kept += kept_now;
      done = kept_now == 0;
    }
    sweeps += rounds;
    return done;
  };
  bool converged = improve(rank);
  std::vector<std::vector<int>> from_contiguous(L, rank[0]);
  for (std::size_t e = 0; e < E; ++e) from_contiguous[0][e] = static_cast<int>(e / slots);
  for (std::size_t l = 1; l < L; ++l) from_contiguous[l] = from_contiguous[0];
  const bool converged_contiguous = improve(from_contiguous);
  const bool contiguous_start = total_cost(from_contiguous, pairs, cost, E, G) < total_cost(rank, pairs, cost, E, G);
  if (contiguous_start) {
    rank = std::move(from_contiguous);
    converged = converged_contiguous;
  }
  const double objective = total_cost(rank, pairs, cost, E, G);
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t e = 0; e < E; ++e) p.ranks[l][e] = {rank[l][e]};

  // The three levels of the cost for the report: the cheapest rank pair within a node and between nodes.
  const std::vector<int> node = rank_nodes(input.cluster, input.ep, input.tp);
  double c_intra = 0.0, c_inter = 0.0;
  for (std::size_t a = 0; a < G; ++a)
    for (std::size_t b = 0; b < G; ++b) {
      if (a == b) continue;
      double& c = node[a] == node[b] ? c_intra : c_inter;
      c = c == 0.0 ? cost[a * G + b] : std::min(c, cost[a * G + b]);
    }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  p.report = {{"status", converged ? "converged" : "sweep_limit"},
              {"objective", objective},
              {"objective_units",
               "s: sum over adjacent layers of cross-layer tokens x seconds per token between "
               "their ranks"},
              {"contiguous_objective", contiguous},
              {"forward_pass_objective", forward},
              {"start", contiguous_start ? "contiguous" : "forward pass"},
              {"sweeps", sweeps},
              {"layer_solves", solves},
              {"layer_solves_kept", kept},
              {"experts_per_rank", slots},
              {"cross_layer_pairs", input.options.residence ? "next_owner (residence dispatch)" : "next"},
              {"cost_per_token_s", {{"same_rank", 0.0}, {"intra_node", c_intra}, {"inter_node", c_inter}}},
              {"seconds", seconds},
              {"profiled_tokens", input.routing->tokens}};
  return p;
}

}  // namespace

double exflow_objective(const Placement& placement, const RoutingCounts& routing, const models::Architecture& arch,
                        const models::Cluster& cluster, bool residence) {
  const Pairs& pairs = affinity_pairs(routing, residence);
  const auto E = static_cast<std::size_t>(routing.num_experts);
  const auto G = static_cast<std::size_t>(placement.ep);
  std::vector<std::vector<int>> rank(placement.ranks.size(), std::vector<int>(E));
  for (std::size_t l = 0; l < placement.ranks.size(); ++l)
    for (std::size_t e = 0; e < E && e < placement.ranks[l].size(); ++e) {
      if (placement.ranks[l][e].size() != 1)
        throw common::InputError("exflow_objective: expert " + std::to_string(e) + " of MoE layer " +
                                 std::to_string(placement.layers[l]) + " has " +
                                 std::to_string(placement.ranks[l][e].size()) + " copies; the objective takes one");
      rank[l][e] = placement.ranks[l][e][0];
    }
  return total_cost(rank, pairs, rank_token_cost(arch, cluster, placement.ep, placement.tp), E, G);
}

void register_exflow_placement(PlacementRegistry& registry) {
  registry.add("exflow",
               "ExFlow's affinity placement: E/EP experts per rank in every layer, minimising the seconds of "
               "tokens moving between adjacent layers' ranks (--dispatch residence: from the owner's expert)",
               [] { return std::make_unique<ExflowPolicy>(); });
}

}  // namespace moesim::sim
