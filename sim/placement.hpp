// Expert placements (the placement file, docs/placement-format.md) and the placement-policy
// interface. A placement maps, per MoE layer, every routed expert to one or more EP ranks (replicas);
// a rank's expert count may differ between layers. Policies are chosen by name from an explicit
// registry; the placement issue adds solvers (greedy, eplb, moetuner, ...) behind the same interface.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "traces/trace.hpp"

namespace moesim::sim {

inline constexpr int kPlacementSchemaVersion = 1;

struct Placement {
  std::string architecture;  // architecture name
  std::string cluster;       // cluster name
  int ep = 0;                // EP ranks
  int tp = 1;                // GPUs per EP rank (TP group)
  std::string policy;        // the policy that made it
  std::string trace_sha256;  // of the trace it was solved on; "" when none was used
  std::vector<int> layers;   // decoder-layer index of each MoE layer, as in the architecture
  // ranks[l][e]: the EP ranks holding a copy of expert e in layer layers[l] (at least one, distinct).
  std::vector<std::vector<std::vector<int>>> ranks;
  nlohmann::json report = nlohmann::json::object();  // the policy's own report (solver status, bounds...)

  // Experts (copies) held by `rank` in layer index l.
  std::vector<int> experts_on(std::size_t l, int rank) const;
};

// Checks a placement against an architecture and EP size: every layer present, every expert on at
// least one rank, ranks in range, no duplicate rank for one expert. Throws InputError naming `file`.
void validate_placement(const Placement& placement, const models::Architecture& arch, const std::string& file);

Placement load_placement(const std::string& path);  // strict YAML; errors name file:line:col
std::string placement_to_yaml(const Placement& placement);
void save_placement(const Placement& placement, const std::string& path, bool overwrite);  // atomic

// Routing statistics a policy may use (MoETuner's P and R): per layer the tokens routed to each
// expert (one count per top-k assignment), and for adjacent MoE layers the tokens routed to e1 in
// layer l and to e2 in layer l+1 (every pair of the token's top-k sets, k x k per token).
struct RoutingCounts {
  std::vector<int> layers;
  int num_experts = 0;
  int top_k = 0;
  std::uint64_t tokens = 0;
  std::string trace_sha256;
  std::vector<std::vector<double>> load;  // [l][e]
  std::vector<std::vector<double>> next;  // [l][e1 * E + e2], l < layers.size() - 1
};
RoutingCounts count_routing(traces::TraceReader& reader, const std::string& trace_sha256);

struct PlacementOptions {
  int replicas = 0;          // redundant expert slots per layer (eplb)
  int groups = 0;            // expert groups (eplb; 0 = the architecture's routing groups)
  std::uint64_t seed = 1;    // random
  double time_limit = 0.0;   // s, 0 = use the deterministic work limit only
};

struct PlacementInput {
  const models::Architecture& arch;
  const models::Cluster& cluster;
  int ep = 0;
  int tp = 1;
  const RoutingCounts* routing = nullptr;  // null for policies that need no traffic (contiguous, round_robin)
  PlacementOptions options;
};

// Contract: place() returns a placement valid for (arch, ep) or throws InputError (bad input) /
// RunError (the policy could not produce one). Deterministic for the same input.
class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual std::string name() const = 0;
  virtual bool needs_routing() const = 0;
  virtual Placement place(const PlacementInput& input) const = 0;
};

class PlacementRegistry {
 public:
  using Factory = std::function<std::unique_ptr<PlacementPolicy>()>;
  void add(const std::string& name, const std::string& summary, Factory factory);
  // Throws InputError listing the valid names for an unknown one.
  std::unique_ptr<PlacementPolicy> create(const std::string& name) const;
  std::vector<std::string> names() const;
  std::string summary(const std::string& name) const;

 private:
  struct Entry {
    std::string name;
    std::string summary;
    Factory factory;
  };
  std::vector<Entry> entries_;
};

// contiguous (Megatron: experts 0..E/EP-1 on rank 0, ...) and round_robin (expert e on rank e % EP).
void register_builtin_placements(PlacementRegistry& registry);
PlacementRegistry default_placement_registry();

}  // namespace moesim::sim
