#include "sim/placement/export.hpp"

#include <algorithm>
#include <vector>

#include "common/error.hpp"
#include "common/strings.hpp"

namespace moesim::sim {

namespace {

nlohmann::json megatron_export(const Placement& p) {
  const std::size_t L = p.layers.size();
  const std::size_t E = L ? p.ranks[0].size() : 0;
  nlohmann::json layers = nlohmann::json::array();
  for (std::size_t l = 0; l < L; ++l) {
    nlohmann::json ranks = nlohmann::json::array();
    for (int r = 0; r < p.ep; ++r) ranks.push_back(p.experts_on(l, r));
    layers.push_back({{"layer", p.layers[l]}, {"experts_per_rank", ranks}});
  }
  return {{"format", "megatron"}, {"ep_size", p.ep},    {"tp_size", p.tp},
          {"num_experts", E},     {"policy", p.policy}, {"layers", layers}};
}

// The slots every rank holds in every layer; throws InputError naming `file` when they differ.
std::size_t uniform_slots(const Placement& p, const std::string& file) {
  const std::size_t L = p.layers.size();
  std::size_t slots = 0;
  for (std::size_t l = 0; l < L; ++l)
    for (int r = 0; r < p.ep; ++r) slots = std::max(slots, p.experts_on(l, r).size());
  for (std::size_t l = 0; l < L; ++l)
    for (int r = 0; r < p.ep; ++r)
      if (p.experts_on(l, r).size() != slots)
        throw common::InputError(
            file + ": layer " + std::to_string(p.layers[l]) + ": rank " + std::to_string(r) + " holds " +
            std::to_string(p.experts_on(l, r).size()) + " experts, another rank " + std::to_string(slots) +
            "; vLLM's and SGLang's expert maps need the same number of slots on every rank of every layer "
            "(export --format megatron for uneven layouts, or solve with eplb)");
  return slots;
}

// The engines' EPLB layout: ep x slots physical experts per layer, slot s on rank s / slots.
nlohmann::json engine_export(const Placement& p, bool vllm, std::size_t slots) {
  const std::size_t L = p.layers.size();
  const std::size_t E = L ? p.ranks[0].size() : 0;
  std::vector<std::vector<int>> phy2log(L);
  std::vector<std::vector<std::vector<int>>> log2phy(L, std::vector<std::vector<int>>(E));
  std::size_t max_copies = 1;
  for (std::size_t l = 0; l < L; ++l) {
    for (int r = 0; r < p.ep; ++r)
      for (int e : p.experts_on(l, r)) {
        log2phy[l][static_cast<std::size_t>(e)].push_back(static_cast<int>(phy2log[l].size()));
        phy2log[l].push_back(e);
      }
    for (const auto& v : log2phy[l]) max_copies = std::max(max_copies, v.size());
  }
  std::vector<std::vector<int>> count(L, std::vector<int>(E, 0));
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t e = 0; e < E; ++e) {
      count[l][e] = static_cast<int>(log2phy[l][e].size());
      log2phy[l][e].resize(max_copies, -1);
    }
  return {{"format", vllm ? "vllm" : "sglang"},
          {"ep_size", p.ep},
          {"num_moe_layers", L},
          {"moe_layers", p.layers},
          {"num_logical_experts", E},
          {"num_physical_experts", slots * static_cast<std::size_t>(p.ep)},
          {"policy", p.policy},
          {"physical_to_logical_map", phy2log},
          {vllm ? "logical_to_physical_map" : "logical_to_all_physical_map", log2phy},
          {vllm ? "logical_replica_count" : "logical_to_all_physical_map_num_valid", count}};
}

}  // namespace

ExportFormat parse_export_format(const std::string& name) {
  if (name == "vllm") return ExportFormat::kVllm;
  if (name == "sglang") return ExportFormat::kSglang;
  if (name == "megatron") return ExportFormat::kMegatron;
  const std::vector<std::string> names{"vllm", "sglang", "megatron"};
  throw common::UsageError("unknown --format " + common::quoted(name) + common::did_you_mean(name, names) +
                           "; valid formats: vllm, sglang, megatron");
}

nlohmann::json export_placement(const Placement& p, ExportFormat format, const std::string& file) {
  if (format == ExportFormat::kMegatron) return megatron_export(p);
  return engine_export(p, format == ExportFormat::kVllm, uniform_slots(p, file));
}

}  // namespace moesim::sim
