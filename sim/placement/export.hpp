// Placements handed to serving engines (docs/placement.md, "Export"). Each format is what the engine
// really reads: SGLang's `--init-expert-location` file (one physical-to-logical row per decoder layer),
// vllm-ascend's expert_map_path file (one entry per MoE layer), the vLLM or Megatron-Core option that rebuilds the
// placement (neither loads a map), or the expert order that turns an engine's contiguous layout into the placement by
// permuting the checkpoint. Pure: JSON and launch flags out, the caller writes the file and prints the flags.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/architecture.hpp"
#include "sim/placement/placement.hpp"

namespace moesim::sim {

enum class ExportFormat { kSglang, kVllm, kVllmAscend, kMegatron, kPermutation };
ExportFormat parse_export_format(const std::string& name);  // throws UsageError listing the formats

struct PlacementExport {
  nlohmann::json file;             // what to write; null when the engine reads no file (vllm)
  std::vector<std::string> flags;  // engine launch options, e.g. "--ep-num-redundant-experts 8"
  std::vector<std::string> notes;  // conditions the engine puts on those options, one line each
};

// `placement` must have passed validate_placement against `arch`. `file` names the placement in
// errors; `output` is the file the export will be written to, "" when none (it appears in the flags).
// A placement the format cannot express is an InputError naming `file`, the reason and the format
// that can (permutation for any non-replicated layout with the same expert count on every rank).
PlacementExport export_placement(const Placement& placement, const models::Architecture& arch, ExportFormat format,
                                 const std::string& file, const std::string& output);

// The permutation format's per-MoE-layer order: order[l][j] is the logical expert that goes to
// position j of layer placement.layers[l], so that the contiguous layout (rank r holding positions
// r*E/EP .. (r+1)*E/EP-1) holds on each rank exactly the experts the placement puts there.
// InputError naming `file` when the placement has replicas or ranks with different expert counts,
// or when the order would move an expert out of its routing group (group-limited routing).
std::vector<std::vector<int>> contiguous_expert_order(const Placement& placement, const models::Architecture& arch,
                                                      const std::string& file);

}  // namespace moesim::sim
