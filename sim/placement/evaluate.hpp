// Scoring placements on traffic the solver did not see (docs/placement.md). The analytic figures come
// straight from the held-out trace, routed as the simulator routes it (routing_rule.hpp): loads in
// token-expert assignments, bytes of dispatched hidden states, the traffic objective in seconds. The
// simulated ones are added by sim/study/placement_sim.hpp. Flat dispatch (the default) counts a token's
// dispatches from its home rank; residence dispatch (routing_rule.hpp) counts each layer's dispatch from
// where the token lives and the combine sends to its new owner.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "sim/placement/placement.hpp"

namespace moesim::sim {

// A placement file checked against its architecture, EP/TP overrides and GPU memory (expert weights of
// every layer a rank holds must fit one GPU of the cluster). Throws InputError naming the file.
struct CheckedPlacement {
  std::string path;
  Placement placement;
  models::Architecture arch;
  models::Cluster cluster;
};
struct PlacementOverrides {
  std::string architecture, cluster;  // "" = the file's
};
CheckedPlacement load_checked_placement(const std::string& path, const PlacementOverrides& overrides = {});
// Bytes of one routed expert's weights on one GPU of its TP group.
double expert_bytes_per_gpu(const models::Architecture& arch, int tp);

struct PlacementEvaluation {
  std::string label;  // the file name
  std::string policy;
  int ep = 0, tp = 1;
  std::string architecture, cluster;
  std::uint64_t tokens = 0;
  std::vector<int> layers;
  std::vector<double> layer_max, layer_mean;  // rank load per layer (token-expert assignments)
  double mean_max_over_mean = 0.0;            // mean over layers of max / mean
  double worst_max_over_mean = 0.0;
  double sum_layer_max = 0.0;  // sum over layers of the busiest rank's load
  bool residence = false;      // the dispatch evaluated: residence, else flat
  double transfers = 0.0;      // (token, layer, destination rank) dispatches; residence: plus combine sends
  double share_off_gpu = 0.0, share_off_node = 0.0;  // of `transfers`
  // Residence only: the sends (dispatches to a rank other than the token's residence, and combine sends
  // of a rank other than the owner to the owner), those between nodes, and their bytes.
  double sends = 0.0, sends_off_node = 0.0, bytes_off_node = 0.0;
  // [home rank][expert rank], dispatch bytes over all layers; residence: [from rank][to rank], the bytes
  // of dispatch and combine sends
  std::vector<std::vector<double>> pair_bytes;
  double traffic_objective = 0.0;               // the stage-2 objective (s) on the held-out counts
  // Of a token's hops from its layer-l experts to its layer-(l+1) experts (MoETuner's cross-layer
  // traffic, the R counts split over copies), the share whose two ranks are on different nodes.
  double share_hops_off_node = 0.0;
  int experts_per_rank_max = 0;  // over all layers
  bool simulated = false;
  std::string study;
  double step_p50 = 0, step_p99 = 0, energy_per_step = 0, energy_per_token = 0;  // s, J
  std::vector<double> layer_token_tail, layer_a2a_tail;                          // s, per MoE layer
  nlohmann::json report;                                                         // the solver's
  nlohmann::json to_json() const;
};

// The figures computed from the held-out trace (simulated is false; sim/study/placement_sim.hpp adds
// the simulated ones). `residence`: route and count as residence dispatch, and score the cross-layer
// figures on the owner pairs (RoutingCounts::next_owner).
PlacementEvaluation evaluate_placement(const CheckedPlacement& placement, const std::string& heldout_trace,
                                       bool residence = false);

// Console output: the per-layer table of one placement, and the side-by-side comparison.
std::string evaluation_table(const PlacementEvaluation& e);
std::string comparison_table(const std::vector<PlacementEvaluation>& all);

}  // namespace moesim::sim
