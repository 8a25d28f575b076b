// DeepSeek's expert-parallel load balancer as published (deepseek-ai/EPLB rebalance_experts) and the
// eplb placement policy built on it. Weights are per-layer expert loads (token-expert assignments);
// a slot is one physical expert copy, slot s of a layer on GPU (EP rank) s / (slots / gpus).
#pragma once

#include <vector>

namespace moesim::sim {

// `weight[l][e]` loads, `slots` physical experts per layer (experts + redundant), `groups` expert
// groups, `nodes`, `gpus`. Hierarchical when nodes divide groups, else global (groups = nodes = 1).
// phy2log[l][s]: the logical expert in slot s. Throws InputError when the sizes do not divide as EPLB
// needs.
struct EplbMap {
  std::vector<std::vector<int>> phy2log;
  std::vector<std::vector<int>> replica_count;  // [l][e]
  bool hierarchical = false;
};
EplbMap eplb_rebalance(const std::vector<std::vector<double>>& weight, int slots, int groups, int nodes, int gpus);

}  // namespace moesim::sim
