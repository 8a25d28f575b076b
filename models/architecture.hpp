// A model architecture as the simulator and the trace tools see it (configs/architectures/*.yaml,
// documented in docs/config-reference.md). Sizes are element counts; dtype names the weight and
// activation type of the model ("bf16", "fp16", "fp8", "fp32").
#pragma once

#include <string>
#include <vector>

#include "common/yaml.hpp"
#include "models/dtype.hpp"
#include "traces/trace.hpp"

namespace moesim::models {

struct AttentionShape {
  std::string kind;  // "mha", "gqa" or "mla"
  int num_heads = 0;
  int num_kv_heads = 0;  // mha: = num_heads
  int head_dim = 0;      // mha / gqa
  // mla only
  int q_lora_rank = 0;  // 0: queries are not low-rank
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
};

struct Architecture {
  std::string name;         // file stem, e.g. "mixtral-8x7b"
  std::string source_file;  // where it was loaded from
  int num_layers = 0;       // decoder layers
  std::vector<int> moe_layers;  // decoder-layer indices of the MoE layers, ascending; empty: dense model
  int hidden_size = 0;
  int dense_ffn_size = 0;   // FFN size of dense layers (0 when every layer is MoE)
  int num_experts = 0;      // routed experts per MoE layer
  int expert_ffn_size = 0;
  int num_shared_experts = 0;
  int shared_expert_ffn_size = 0;
  int top_k = 0;
  int routing_groups = 1;   // group-limited routing: groups of experts (1 = none)
  int topk_groups = 1;      // groups a token may use
  std::string activation;   // "swiglu" (3 projections) or "gelu" (2)
  int ffn_projections = 3;  // derived from activation
  AttentionShape attention;
  int vocab_size = 0;
  Dtype dtype = Dtype::kBf16;  // never kTf32

  bool is_moe() const { return !moe_layers.empty(); }
  traces::TraceShape trace_shape() const;  // the routing shape a trace of this model has
};

// The one check that a routing trace (or routing counts) fits an architecture: the same MoE layers,
// expert count and top-k. Returns "" when it fits, else what differs ("expected a trace of NAME's
// routing (MoE layers 1-26, 64 experts, top-6), got one of OTHER (...)"), for the caller to prefix
// with its file or YAML location.
std::string trace_shape_mismatch(const traces::TraceShape& shape, const Architecture& arch);

// Validates every field; errors name the file, line and key path.
Architecture parse_architecture(const common::YamlNode& root, const std::string& name);
// By name (configs/architectures/NAME.yaml) or path, with `--set` overrides applied first.
Architecture load_architecture(const std::string& name_or_path, const std::vector<std::string>& overrides = {});

}  // namespace moesim::models
