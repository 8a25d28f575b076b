// Helpers shared by the placement solver files (not part of the public placement API): input checks,
// the skeleton every policy fills, and the moetuner factory (defined with the GLPK code).
#pragma once

#include <memory>
#include <string>

#include "sim/placement.hpp"

namespace moesim::sim::detail {

// Checks the input (MoE architecture, ep/tp shape against the cluster, routing matching the
// architecture when `needs_routing`) and returns a placement with ranks sized [layer][expert].
Placement placement_skeleton(const PlacementInput& input, const std::string& policy, bool needs_routing);

// plain: moetuner; equal_sizes: every cluster holds floor or ceil of E / EP experts (moetuner_equal);
// replicated: --replicas redundant copies packed in stage 1 (moetuner_replicated).
enum class MoetunerMode { plain, equal_sizes, replicated };
std::unique_ptr<PlacementPolicy> make_moetuner_policy(MoetunerMode mode);

}  // namespace moesim::sim::detail
