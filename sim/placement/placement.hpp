// Expert placements and their file (docs/placement-format.md). A placement maps, per MoE layer, every
// routed expert to one or more EP ranks (replicas); a rank's expert count may differ between layers.
// EP rank r is the TP group of GPUs r*tp .. r*tp+tp-1. Files are strict YAML (errors name
// file:line:col), written atomically; placement_to_yaml and load_placement round-trip exactly.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/architecture.hpp"
#include "models/cluster.hpp"

namespace moesim::sim {

inline constexpr int kPlacementSchemaVersion = 1;

struct Placement {
  std::string architecture;  // architecture name
  std::string cluster;       // cluster name
  int ep = 0;                // EP ranks
  int tp = 1;                // GPUs per EP rank (TP group)
  std::string policy;        // the policy that made it
  std::string trace_sha256;  // of the trace it was solved on; "" when none or several (report.robust) were used
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

// Checks that ep x tp fits the cluster: tp a power of two dividing a node's GPUs (a TP group stays
// inside a node), ep x tp dividing the cluster's GPUs. Throws InputError prefixed with `where`.
void check_parallel_shape(int ep, int tp, const models::Cluster& cluster, const std::string& where);

Placement load_placement(const std::string& path);  // strict YAML; errors name file:line:col
std::string placement_to_yaml(const Placement& placement);
void save_placement(const Placement& placement, const std::string& path, bool overwrite);  // atomic

}  // namespace moesim::sim
