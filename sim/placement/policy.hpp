// The placement-policy extension point (docs/placement.md): the interface every policy implements,
// the registry that creates one by name, and the skeleton implementations start from. Policies read
// routing counts (token-expert assignments, routing_counts.hpp) and write a Placement; the built-ins
// are registered by register_builtin_placements, called once (no static self-registration).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "sim/placement/placement.hpp"
#include "sim/placement/routing_counts.hpp"

namespace moesim::sim {

struct PlacementOptions {
  int replicas = 0;         // redundant expert slots per layer (eplb, moetuner_replicated)
  int groups = 0;           // expert groups (eplb; 0 = the architecture's routing groups)
  std::uint64_t seed = 1;   // random
  double time_limit = 0.0;  // s, 0 = use the deterministic work limit only
  // Residence dispatch (routing_rule.hpp): a token's next layer starts from its owner rank, so the
  // policies that weigh cross-layer pairs (moetuner's stage 2, exflow) read RoutingCounts::next_owner.
  bool residence = false;
};

// The input of one solve; it refers to configs the caller owns for the duration of place().
struct PlacementInput {
  const models::Architecture& arch;
  const models::Cluster& cluster;
  int ep = 0;
  int tp = 1;
  const RoutingCounts* routing = nullptr;  // null for policies that need no traffic (contiguous, round_robin)
  PlacementOptions options;
};

// Contract: place() returns a placement valid for (arch, ep) or throws InputError (bad input) /
// RunError (the policy could not produce one). Deterministic for the same input (a time limit aside).
// needs_routing(): place() requires input.routing. name(): the registry name, written to
// Placement::policy. A policy keeps no state between calls.
class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual std::string name() const = 0;
  virtual bool needs_routing() const = 0;
  // place() reads the cross-layer pair counts (RoutingCounts::next) as well as the loads, so a caller
  // that counts routing itself (online rebalancing) must count them too.
  virtual bool needs_pairs() const { return false; }
  virtual Placement place(const PlacementInput& input) const = 0;
};

class PlacementRegistry {
 public:
  using Factory = std::function<std::unique_ptr<PlacementPolicy>()>;
  // Throws std::logic_error for an empty name or factory, or a name registered twice.
  void add(const std::string& name, const std::string& summary, Factory factory);
  // Throws InputError listing the valid names for an unknown one.
  std::unique_ptr<PlacementPolicy> create(const std::string& name) const;
  std::vector<std::string> names() const;  // in registration order
  std::string summary(const std::string& name) const;

 private:
  struct Entry {
    std::string name;
    std::string summary;
    Factory factory;
  };
  std::vector<Entry> entries_;
};

// Registers contiguous, round_robin, random, greedy, eplb, moetuner, moetuner_equal,
// moetuner_replicated and exflow, in that order (builtin_policies.cpp).
void register_builtin_placements(PlacementRegistry& registry);
PlacementRegistry default_placement_registry();

// For policy implementations.
namespace detail {

// Checks the input (MoE architecture, ep/tp shape against the cluster, routing matching the
// architecture when `needs_routing`) and returns a placement with ranks sized [layer][expert].
Placement placement_skeleton(const PlacementInput& input, const std::string& policy, bool needs_routing);

// What a placement file stores for its architecture or cluster: the name when the config is the
// shipped one of that name (it resolves by name to the same file), else the absolute path of the file
// it was loaded from, so that the placement loads again from anywhere.
std::string config_reference(std::string_view kind, const std::string& name, const std::string& source_file);

}  // namespace detail

}  // namespace moesim::sim
