#include "sim/engine/step_graph.hpp"

namespace moesim::sim {

void StepGraph::clear() {
  tasks.clear();
  edges.clear();
  succ_begin.clear();
  succ.clear();
  end_task = 0;
  tokens = 0;
  pair_bytes.clear();
  held.clear();
  error = nullptr;
  moved_step = -1;
  moved_experts = 0;
  moved_bytes = 0.0;
  token_sends = 0;
  token_layers = 0;
  context_bytes = 0.0;
  coherence_bytes = 0.0;
  token_inter_node_bytes = 0.0;
}

void StepGraph::finalize() {
  const std::size_t n = tasks.size();
  succ_begin.assign(n + 1, 0);
  for (const auto& e : edges) ++succ_begin[e.first + 1];
  for (std::size_t i = 0; i < n; ++i) succ_begin[i + 1] += succ_begin[i];
  succ.resize(edges.size());
  // A stable counting sort: each task's successors keep the order in which edges were added.
  fill_.assign(succ_begin.begin(), succ_begin.end() - 1);
  for (const auto& e : edges) succ[fill_[e.first]++] = e.second;
}

}  // namespace moesim::sim
