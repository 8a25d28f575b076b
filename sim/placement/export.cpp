#include "sim/placement/export.hpp"

#include <algorithm>
#include <cstddef>
#include <stdexcept>

#include "common/error.hpp"
#include "common/strings.hpp"

// The engine contracts implemented here, read from their public sources (never copied):
// - SGLang (github.com/sgl-project/sglang, read at commit 01fec5c2): python/sglang/srt/eplb/expert_location.py,
//   compute_initial_expert_location_metadata reads `--init-expert-location` as a file only when the
//   name ends in .json (or .pt), else as inline JSON, and passes every key of the object to
//   ExpertLocationMetadata.init_by_mapping(server_args, model_config, physical_to_logical_map), so
//   `physical_to_logical_map` must be the only key. _init_common sets num_physical_experts =
//   num_logical_experts + server_args.ep_num_redundant_experts and asserts it divides by ep_size;
//   _compute_gpu_id_of_physical_expert puts slot s on GPU s / num_local_physical_experts;
//   compute_logical_to_rank_dispatch_physical_map (static dispatch) needs every logical expert in
//   every row. The rows are decoder layers: ModelConfigForExpertLocation.num_layers is
//   config.num_hidden_layers (get_model_config_for_expert_location of python/sglang/srt/models/deepseek_v2.py
//   and of the Qwen MoE models) and the MoE blocks look their row up by their decoder
//   layer_id (ExpertLocationDispatchInfo.init_new(layer_id=...)); dense layers' rows are never used for
//   dispatch but must still be valid, so they hold SGLang's own trivial row (init_trivial:
//   physical expert p holds logical p % num_logical_experts). The metadata's ep_size property is the
//   world size, so an EP rank is one GPU.
// - vLLM (github.com/vllm-project/vllm): vllm/config/parallel.py, ParallelConfig.expert_placement_strategy
//   ("linear" | "round_robin", flag --expert-placement-strategy); vllm/model_executor/layers/fused_moe
//   determine_expert_map (linear: rank r holds E/EP experts from r*(E/EP) + min(r, E%EP), the first
//   E%EP ranks one more; round_robin: rank r holds r, r+EP, ...) and determine_expert_placement_strategy
//   (round_robin only with num_expert_group > 1, no redundant experts and no EPLB, else linear). vLLM
//   reads no initial expert map: its EPLB starts from this layout. Its EP size is TP x DP GPUs.
// - vllm-ascend (github.com/vllm-project/vllm-ascend): vllm_ascend/ops/expert_load_balancer.py,
//   ExpertLoadBalancer reads the JSON named by --additional-config '{"expert_map_path": ...}':
//   {"moe_layer_count", "layer_list": [{"layer_id", "device_count", "device_list": [{"device_id",
//   "device_expert": [...]}]}]}, turned into one rectangular tensor [layer][device][slot] (equal slot
//   counts), looked up by the MoE layer's moe_instance_id (AscendFusedMoE.moe_counter, from 0 in model
//   order, MoE layers only); a device's local expert i is device_expert[i], and the redundant count is
//   len(device_expert) x devices - experts (get_global_redundant_expert_num).
// - Megatron-Core (github.com/NVIDIA/Megatron-LM): megatron/core/transformer/moe/moe_layer.py,
//   BaseMoELayer asserts num_moe_experts % expert_model_parallel_size == 0 and gives EP rank r the
//   experts r*E/EP .. (r+1)*E/EP-1; no other layout and no replicas.

namespace moesim::sim {

namespace {

const std::vector<std::string> kFormatNames{"sglang", "vllm", "vllm-ascend", "megatron", "permutation"};

std::size_t expert_count(const models::Architecture& arch) {
  return static_cast<std::size_t>(arch.num_experts);
}

bool has_replicas(const Placement& p) {
  for (const auto& layer : p.ranks)
    for (const auto& holders : layer)
      if (holders.size() > 1) return true;
  return false;
}

// The first (layer, expert) with more than one copy, for messages.
std::string first_replica(const Placement& p) {
  for (std::size_t l = 0; l < p.ranks.size(); ++l)
    for (std::size_t e = 0; e < p.ranks[l].size(); ++e)
      if (p.ranks[l][e].size() > 1)
        return "layer " + std::to_string(p.layers[l]) + " holds " + std::to_string(p.ranks[l][e].size()) +
               " copies of expert " + std::to_string(e);
  return "";
}

// Without replicas: does every expert e sit on rank rank_of(e)?
template <typename RankOf>
bool follows(const Placement& p, RankOf rank_of) {
  if (has_replicas(p)) return false;
  for (const auto& layer : p.ranks)
    for (std::size_t e = 0; e < layer.size(); ++e)
      if (layer[e].front() != rank_of(e)) return false;
  return true;
}

// vLLM's linear layout (= moesim's contiguous policy): the first E % EP ranks hold one expert more.
bool is_linear(const Placement& p, std::size_t experts) {
  const std::size_t ep = static_cast<std::size_t>(p.ep);
  const std::size_t base = experts / ep, extra = experts % ep;
  return follows(p, [&](std::size_t e) {
    const std::size_t wide = extra * (base + 1);  // experts on the ranks that hold one more
    return static_cast<int>(e < wide ? e / (base + 1) : extra + (e - wide) / std::max<std::size_t>(base, 1));
  });
}

bool is_round_robin(const Placement& p) {
  return follows(p, [&](std::size_t e) { return static_cast<int>(e % static_cast<std::size_t>(p.ep)); });
}

std::string layout_name(const Placement& p, std::size_t experts) {
  if (is_linear(p, experts)) return "contiguous";
  if (is_round_robin(p)) return "round-robin";
  return has_replicas(p) ? "replicated" : "non-contiguous";
}

// The engines that load a map make every EP rank one GPU.
void require_one_gpu_per_rank(const Placement& p, const std::string& file, const std::string& engine,
                              const std::string& why) {
  if (p.tp == 1) return;
  throw common::InputError(file + ": tp " + std::to_string(p.tp) + ": " + engine + " makes every GPU one EP rank (" +
                           why + "), while this placement's EP ranks are groups of " + std::to_string(p.tp) +
                           " GPUs; solve the placement with --tp 1");
}

// The slots every rank holds in every layer; InputError naming `file` when they differ.
std::size_t uniform_slots(const Placement& p, const std::string& file, const std::string& engine) {
  std::size_t slots = 0;
  for (std::size_t l = 0; l < p.layers.size(); ++l)
    for (int r = 0; r < p.ep; ++r) slots = std::max(slots, p.experts_on(l, r).size());
  for (std::size_t l = 0; l < p.layers.size(); ++l)
    for (int r = 0; r < p.ep; ++r)
      if (const std::size_t n = p.experts_on(l, r).size(); n != slots)
        throw common::InputError(file + ": layer " + std::to_string(p.layers[l]) + ": rank " + std::to_string(r) +
                                 " holds " + std::to_string(n) + " experts, another rank " + std::to_string(slots) +
                                 "; " + engine +
                                 " needs the same number of slots on every rank of every layer: solve with eplb, "
                                 "moetuner_equal or moetuner_replicated");
  return slots;
}

PlacementExport sglang_export(const Placement& p, const models::Architecture& arch, const std::string& file,
                              const std::string& output) {
  require_one_gpu_per_rank(p, file, "SGLang", "ExpertLocationMetadata.ep_size is the world size");
  const std::size_t experts = expert_count(arch);
  const std::size_t slots = uniform_slots(
      p, file,
      "SGLang's --init-expert-location (num_physical_experts divisible by the EP size, slot s on GPU s / slots)");
  const std::size_t physical = slots * static_cast<std::size_t>(p.ep);
  // One row per decoder layer; a dense layer gets SGLang's trivial row (p % E), every expert present.
  std::vector<std::vector<int>> rows(static_cast<std::size_t>(arch.num_layers));
  for (std::size_t d = 0; d < rows.size(); ++d)
    for (std::size_t s = 0; s < physical; ++s) rows[d].push_back(static_cast<int>(s % experts));
  for (std::size_t l = 0; l < p.layers.size(); ++l) {
    auto& row = rows.at(static_cast<std::size_t>(p.layers[l]));
    row.clear();
    for (int r = 0; r < p.ep; ++r)
      for (int e : p.experts_on(l, r)) row.push_back(e);
  }
  PlacementExport out;
  out.file = nlohmann::json{{"physical_to_logical_map", rows}};
  const std::string ep = std::to_string(p.ep);
  out.flags = {"--init-expert-location " + (output.empty() ? std::string("FILE.json") : output),
               "--ep-num-redundant-experts " + std::to_string(physical - experts), "--tp-size " + ep,
               "--ep-size " + ep};
  out.notes = {"the file name must end in .json: SGLang reads any other --init-expert-location value as inline JSON",
               "rows are decoder layers (" + std::to_string(arch.num_layers) +
                   "); dense layers hold SGLang's "
                   "trivial row, which no dispatch reads",
               "slot s of a row is on EP rank s / " + std::to_string(slots) + " (" + std::to_string(slots) +
                   " slots per GPU, " + std::to_string(physical) + " physical experts for " + std::to_string(experts) +
                   " logical)"};
  return out;
}

PlacementExport vllm_ascend_export(const Placement& p, const models::Architecture& arch, const std::string& file,
                                   const std::string& output) {
  require_one_gpu_per_rank(p, file, "vllm-ascend", "an EP rank is one device of its EP group");
  const std::size_t slots = uniform_slots(p, file, "vllm-ascend's expert map (one rectangular tensor)");
  nlohmann::json layer_list = nlohmann::json::array();
  for (std::size_t l = 0; l < p.layers.size(); ++l) {
    nlohmann::json devices = nlohmann::json::array();
    for (int r = 0; r < p.ep; ++r) devices.push_back({{"device_id", r}, {"device_expert", p.experts_on(l, r)}});
    layer_list.push_back({{"layer_id", l}, {"device_count", p.ep}, {"device_list", devices}});
  }
  PlacementExport out;
  out.file = {{"moe_layer_count", p.layers.size()}, {"layer_list", layer_list}};
  const std::string path = output.empty() ? std::string("FILE.json") : output;
  out.flags = {"--enable-expert-parallel", "--additional-config '{\"expert_map_path\": \"" + path + "\"}'"};
  out.notes = {
      "layer_id counts MoE layers from 0 in model order (vllm-ascend's MoE instance counter): entry 0 is "
      "decoder layer " +
          std::to_string(p.layers.front()),
      "vllm-ascend infers " + std::to_string(slots * static_cast<std::size_t>(p.ep) - expert_count(arch)) +
          " redundant experts from the file (" + std::to_string(slots) + " slots per device)"};
  return out;
}

PlacementExport vllm_export(const Placement& p, const models::Architecture& arch, const std::string& file) {
  require_one_gpu_per_rank(p, file, "vLLM", "its EP size is tensor-parallel-size x data-parallel-size GPUs");
  const std::size_t experts = expert_count(arch);
  const std::string ep = std::to_string(p.ep);
  PlacementExport out;
  const std::string size_note = "vLLM's EP size is tensor-parallel-size x data-parallel-size: make it " + ep +
                                " (e.g. --tensor-parallel-size 1 --data-parallel-size " + ep + ")";
  if (is_linear(p, experts)) {
    out.flags = {"--enable-expert-parallel", "--expert-placement-strategy linear"};
    out.notes = {size_note, "linear is vLLM's default layout and the one its EPLB starts from"};
    return out;
  }
  if (is_round_robin(p)) {
    if (arch.routing_groups <= 1)
      throw common::InputError(
          file +
          ": a round-robin placement: vLLM keeps --expert-placement-strategy round_robin only for models "
          "with several expert groups (num_expert_group > 1), and " +
          arch.name +
          " routes without groups, so vLLM would fall back to linear; export --format permutation, permute the "
          "checkpoint and serve it with the linear layout (docs/placement.md)");
    out.flags = {"--enable-expert-parallel", "--expert-placement-strategy round_robin"};
    out.notes = {size_note,
                 "vLLM falls back to linear with redundant experts or --enable-eplb, and, with all-to-all kernels, "
                 "on any backend but DeepEP low-latency or NIXL EP"};
    return out;
  }
  if (has_replicas(p))
    throw common::InputError(file + ": a replicated placement (" + first_replica(p) +
                             "): vLLM loads no initial expert map (its EPLB starts from the linear layout and "
                             "moves experts at run time), so no vLLM option reproduces it; export --format sglang "
                             "for SGLang's --init-expert-location, or vllm-ascend on Ascend devices");
  throw common::InputError(file + ": a " + layout_name(p, experts) +
                           " placement: vLLM loads no initial expert map and lays experts out only linear or "
                           "round_robin; export --format permutation, permute the checkpoint's experts and router "
                           "rows by it and serve it with --expert-placement-strategy linear (docs/placement.md)");
}

PlacementExport megatron_export(const Placement& p, const models::Architecture& arch, const std::string& file) {
  const std::size_t experts = expert_count(arch);
  if (has_replicas(p))
    throw common::InputError(file + ": a replicated placement (" + first_replica(p) +
                             "): Megatron-Core holds exactly one copy of every expert; solve without --replicas");
  if (experts % static_cast<std::size_t>(p.ep) != 0)
    throw common::InputError(file + ": ep " + std::to_string(p.ep) + " does not divide the " + std::to_string(experts) +
                             " experts: Megatron-Core asserts num_moe_experts % "
                             "expert_model_parallel_size == 0");
  if (!is_linear(p, experts))
    throw common::InputError(file + ": a " + layout_name(p, experts) +
                             " placement: Megatron-Core gives EP rank r the experts r*E/EP .. (r+1)*E/EP-1 and "
                             "nothing else; export --format permutation and permute the checkpoint by it "
                             "(docs/placement.md)");
  PlacementExport out;
  out.flags = {"--num-experts " + std::to_string(experts), "--expert-model-parallel-size " + std::to_string(p.ep),
               "--expert-tensor-parallel-size " + std::to_string(p.tp)};
  out.notes = {"Megatron-Core's own (and only) layout; it reads no expert map"};
  return out;
}

PlacementExport permutation_export(const Placement& p, const models::Architecture& arch, const std::string& file) {
  const auto order = contiguous_expert_order(p, arch, file);
  nlohmann::json layers = nlohmann::json::array();
  for (std::size_t l = 0; l < order.size(); ++l) layers.push_back({{"layer", p.layers[l]}, {"order", order[l]}});
  PlacementExport out;
  out.file = {{"format", "permutation"}, {"architecture", p.architecture},
              {"policy", p.policy},      {"num_experts", arch.num_experts},
              {"ep_size", p.ep},         {"experts_per_rank", arch.num_experts / p.ep},
              {"layers", layers}};
  out.notes = {
      "position j of layer L takes the expert order[j] of the original checkpoint: permute the router "
      "(gate) rows, any per-expert router bias and the expert weights of each MoE layer by it "
      "(docs/placement.md, \"Permuting the checkpoint\")",
      "then serve the permuted checkpoint in the engine's contiguous layout: vLLM "
      "--expert-placement-strategy linear, SGLang's default --init-expert-location trivial, Megatron-Core "
      "as is"};
  return out;
}

}  // namespace

ExportFormat parse_export_format(const std::string& name) {
  if (name == "sglang") return ExportFormat::kSglang;
  if (name == "vllm") return ExportFormat::kVllm;
  if (name == "vllm-ascend") return ExportFormat::kVllmAscend;
  if (name == "megatron") return ExportFormat::kMegatron;
  if (name == "permutation") return ExportFormat::kPermutation;
  throw common::UsageError("unknown --format " + common::quoted(name) + common::did_you_mean(name, kFormatNames) +
                           "; valid formats: sglang, vllm, vllm-ascend, megatron, permutation");
}

std::vector<std::vector<int>> contiguous_expert_order(const Placement& p, const models::Architecture& arch,
                                                      const std::string& file) {
  const std::size_t experts = expert_count(arch);
  const std::size_t ep = static_cast<std::size_t>(p.ep);
  if (has_replicas(p))
    throw common::InputError(file + ": a replicated placement (" + first_replica(p) +
                             "): a permutation of the checkpoint gives every expert one place; export --format "
                             "sglang, or solve without --replicas");
  if (experts % ep != 0)
    throw common::InputError(file + ": ep " + std::to_string(p.ep) + " does not divide the " + std::to_string(experts) +
                             " experts: a permutation needs the same expert count on "
                             "every rank");
  const std::size_t per_rank = experts / ep;
  const std::size_t groups = static_cast<std::size_t>(std::max(arch.routing_groups, 1));
  const std::size_t group_size = experts / groups;
  std::vector<std::vector<int>> order(p.layers.size());
  for (std::size_t l = 0; l < p.layers.size(); ++l) {
    for (int r = 0; r < p.ep; ++r) {
      const std::vector<int> on = p.experts_on(l, r);
      if (on.size() != per_rank)
        throw common::InputError(file + ": layer " + std::to_string(p.layers[l]) + ": rank " + std::to_string(r) +
                                 " holds " + std::to_string(on.size()) + " experts, the contiguous layout " +
                                 std::to_string(per_rank) +
                                 "; solve with an equal-count policy (moetuner_equal, "
                                 "exflow, eplb, greedy, contiguous, round_robin, random)");
      order[l].insert(order[l].end(), on.begin(), on.end());
    }
    // Group-limited routing scores blocks of E/G consecutive experts: every new block must hold one old
    // block, or the permuted model would choose among different groups.
    if (groups > 1)
      for (std::size_t g = 0; g < groups; ++g) {
        const int old_group = order[l][g * group_size] / static_cast<int>(group_size);
        for (std::size_t j = g * group_size; j < (g + 1) * group_size; ++j)
          if (order[l][j] / static_cast<int>(group_size) != old_group)
            throw common::InputError(
                file + ": layer " + std::to_string(p.layers[l]) + ": " + arch.name + " routes in " +
                std::to_string(groups) + " groups of " + std::to_string(group_size) +
                " consecutive experts, and this placement mixes experts of groups " + std::to_string(old_group) +
                " and " + std::to_string(order[l][j] / static_cast<int>(group_size)) + " in positions " +
                std::to_string(g * group_size) + ".." + std::to_string((g + 1) * group_size - 1) +
                ", so permuting the checkpoint would change which experts a token may reach; a permutation must "
                "keep every group whole");
      }
  }
  return order;
}

PlacementExport export_placement(const Placement& p, const models::Architecture& arch, ExportFormat format,
                                 const std::string& file, const std::string& output) {
  switch (format) {
    case ExportFormat::kSglang:
      return sglang_export(p, arch, file, output);
    case ExportFormat::kVllm:
      return vllm_export(p, arch, file);
    case ExportFormat::kVllmAscend:
      return vllm_ascend_export(p, arch, file, output);
    case ExportFormat::kMegatron:
      return megatron_export(p, arch, file);
    case ExportFormat::kPermutation:
      return permutation_export(p, arch, file);
  }
  throw std::logic_error("export_placement: unknown format");
}

}  // namespace moesim::sim
