// Placements written for serving engines (docs/placement.md): vLLM's and SGLang's per-layer
// physical-to-logical expert maps (every rank the same number of slots, the engines' EPLB layout), and
// Megatron's experts per rank. Pure: JSON out, the caller writes the file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sim/placement/placement.hpp"

namespace moesim::sim {

enum class ExportFormat { kVllm, kSglang, kMegatron };
ExportFormat parse_export_format(const std::string& name);  // throws UsageError listing the formats
// vllm / sglang: per-layer physical-to-logical maps (every rank the same number of slots, the
// engines' layout; otherwise InputError naming `file`); megatron: per layer, the experts of each rank.
nlohmann::json export_placement(const Placement& placement, ExportFormat format, const std::string& file);

}  // namespace moesim::sim
