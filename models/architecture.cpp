#include "models/architecture.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/strings.hpp"
#include "models/config_header.hpp"

namespace moesim::models {

namespace {

using common::YamlNode;

// Generous caps: they only reject values that are certainly typos (or would overflow products).
constexpr std::int64_t kMaxLayers = 100000;
constexpr std::int64_t kMaxWidth = std::int64_t{1} << 22;  // hidden and FFN sizes, ranks
constexpr std::int64_t kMaxVocab = std::int64_t{1} << 26;
constexpr std::int64_t kMaxHeads = 65536;

int read_int(const YamlNode& node, std::int64_t min, std::int64_t max) {
  return static_cast<int>(node.as_int(min, max));
}

// `map.at(key)` for a key that only some configurations need: a missing one is reported with the reason.
YamlNode at_because(const YamlNode& map, std::string_view key, const std::string& reason) {
  if (auto child = map.find(key)) return *child;
  try {
    map.at(key);
  } catch (const common::InputError& e) {
    throw common::InputError(std::string(e.what()) + " (" + reason + ")");
  }
  return map;  // unreachable: at() throws for a missing key
}

std::optional<int> parse_index(std::string_view text) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

// One entry of `moe.layers`: an index ("5") or an inclusive range ("1..26").
std::pair<int, int> parse_layer_item(const YamlNode& item, int num_layers) {
  constexpr std::string_view kExpected = "a layer index or an inclusive range such as \"1..26\"";
  if (!item.is_scalar()) item.fail_expected(kExpected);
  const std::string text = item.as_string();
  std::optional<int> first;
  std::optional<int> last;
  if (auto dots = text.find(".."); dots != std::string::npos) {
    first = parse_index(std::string_view(text).substr(0, dots));
    last = parse_index(std::string_view(text).substr(dots + 2));
  } else {
    first = last = parse_index(text);
  }
  if (!first || !last || *first < 0 || *last < 0) item.fail_expected(kExpected);
  if (*first > *last) item.fail_expected("a range whose first index is not above its last");
  if (*last >= num_layers)
    item.fail_expected("layer indices below num_layers (" + std::to_string(num_layers) + "; layers count from 0)");
  return {*first, *last};
}

std::vector<int> parse_moe_layers(const YamlNode& node, int num_layers) {
  std::vector<YamlNode> items;
  if (node.is_sequence()) {
    items = node.items();
    if (items.empty()) node.fail_expected("at least one MoE layer (a dense model has no moe section)");
  } else {
    items.push_back(node);
  }
  std::map<int, std::string> seen;  // layer -> the entry that listed it
  for (const YamlNode& item : items) {
    auto [first, last] = parse_layer_item(item, num_layers);
    for (int layer = first; layer <= last; ++layer) {
      auto [it, inserted] = seen.emplace(layer, item.path());
      if (!inserted)
        item.fail("expected each layer listed once, got layer " + std::to_string(layer) + " again (already in " +
                  it->second + ")");
    }
  }
  std::vector<int> layers;
  layers.reserve(seen.size());
  for (const auto& [layer, where] : seen) layers.push_back(layer);
  return layers;
}

// Keys that belong to some attention kind; used to say "not for this kind" rather than "unknown".
const std::map<std::string, std::vector<std::string>>& attention_keys() {
  static const std::map<std::string, std::vector<std::string>> keys{
      {"mha", {"kind", "num_heads", "num_kv_heads", "head_dim"}},
      {"gqa", {"kind", "num_heads", "num_kv_heads", "head_dim"}},
      {"mla",
       {"kind", "num_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}},
  };
  return keys;
}

AttentionShape parse_attention(const YamlNode& node) {
  node.expect_map();
  AttentionShape a;
  a.kind = node.at("kind").as_enum({"mha", "gqa", "mla"});
  const std::vector<std::string>& allowed = attention_keys().at(a.kind);
  for (const std::string& key : node.keys()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    for (const auto& [other_kind, other_keys] : attention_keys())
      if (std::find(other_keys.begin(), other_keys.end(), key) != other_keys.end())
        node.at(key).fail("expected only keys of attention kind " + a.kind + " (" + common::join(allowed, ", ") +
                          "), got " + key + ", a key of kind " + other_kind);
  }
  node.allow_keys(allowed);

  const YamlNode heads = node.at("num_heads");
  a.num_heads = read_int(heads, 1, kMaxHeads);
  if (a.kind == "mla") {
    a.num_kv_heads = a.num_heads;  // MLA expands its latent into per-head keys and values
    if (auto q = node.find("q_lora_rank")) a.q_lora_rank = read_int(*q, 0, kMaxWidth);
    a.kv_lora_rank = read_int(node.at("kv_lora_rank"), 1, kMaxWidth);
    a.qk_nope_head_dim = read_int(node.at("qk_nope_head_dim"), 1, kMaxWidth);
    a.qk_rope_head_dim = read_int(node.at("qk_rope_head_dim"), 0, kMaxWidth);
    a.v_head_dim = read_int(node.at("v_head_dim"), 1, kMaxWidth);
    return a;
  }
  a.head_dim = read_int(node.at("head_dim"), 1, kMaxWidth);
  if (a.kind == "mha") {
    a.num_kv_heads = a.num_heads;
    if (auto kv = node.find("num_kv_heads")) {
      if (read_int(*kv, 1, kMaxHeads) != a.num_heads)
        kv->fail_expected("num_kv_heads equal to num_heads (" + std::to_string(a.num_heads) +
                          ") for mha; use kind gqa for fewer key/value heads");
    }
    return a;
  }
  const YamlNode kv = node.at("num_kv_heads");
  a.num_kv_heads = read_int(kv, 1, a.num_heads);
  if (a.num_heads % a.num_kv_heads != 0)
    kv.fail_expected("a divisor of num_heads (" + std::to_string(a.num_heads) + ")");
  return a;
}

void parse_moe(const YamlNode& node, Architecture& arch) {
  node.expect_map();
  node.allow_keys({"layers", "num_experts", "expert_ffn_size", "top_k", "shared_experts", "shared_expert_ffn_size",
                   "routing_groups", "topk_groups"});
  arch.moe_layers = parse_moe_layers(node.at("layers"), arch.num_layers);
  arch.num_experts = read_int(node.at("num_experts"), 1, traces::kMaxExperts);
  arch.expert_ffn_size = read_int(node.at("expert_ffn_size"), 1, kMaxWidth);

  const YamlNode top_k = node.at("top_k");
  arch.top_k = read_int(top_k, 1, traces::kMaxTopK);
  if (arch.top_k > arch.num_experts)
    top_k.fail_expected("at most num_experts (" + std::to_string(arch.num_experts) + ")");

  if (auto shared = node.find("shared_experts")) arch.num_shared_experts = read_int(*shared, 0, traces::kMaxExperts);
  auto shared_ffn = node.find("shared_expert_ffn_size");
  if (arch.num_shared_experts > 0) {
    arch.shared_expert_ffn_size = read_int(
        at_because(node, "shared_expert_ffn_size",
                   "moe.shared_experts is " + std::to_string(arch.num_shared_experts) + ": give their FFN size"),
        1, kMaxWidth);
  } else if (shared_ffn) {
    shared_ffn->fail(
        "expected no shared_expert_ffn_size without shared experts, got one (set shared_experts or "
        "remove it)");
  }

  if (auto groups = node.find("routing_groups")) {
    arch.routing_groups = read_int(*groups, 1, arch.num_experts);
    if (arch.num_experts % arch.routing_groups != 0)
      groups->fail_expected("a divisor of num_experts (" + std::to_string(arch.num_experts) + ")");
  }
  if (auto topk_groups = node.find("topk_groups")) {
    arch.topk_groups = read_int(*topk_groups, 1, arch.routing_groups);
    const int reachable = arch.topk_groups * (arch.num_experts / arch.routing_groups);
    if (arch.top_k > reachable)
      topk_groups->fail_expected("enough groups for top_k (" + std::to_string(arch.top_k) + " experts), got " +
                                 std::to_string(arch.topk_groups) + " groups of " +
                                 std::to_string(arch.num_experts / arch.routing_groups) + " experts");
  } else if (arch.routing_groups > 1) {
    node.fail("expected topk_groups (how many of the " + std::to_string(arch.routing_groups) +
              " routing groups a token may use), got none");
  }
}

// The dtypes a model's weights and activations take: a profile's, less tf32 (a GEMM mode of fp32 data).
std::vector<std::string> model_dtype_names() {
  std::vector<std::string> names;
  for (const auto& d : kDtypes)
    if (d.value != Dtype::kTf32) names.emplace_back(d.name);
  return names;
}

}  // namespace

traces::TraceShape Architecture::trace_shape() const {
  traces::TraceShape shape;
  shape.architecture = name;
  shape.layers = moe_layers;
  shape.num_experts = num_experts;
  shape.top_k = top_k;
  return shape;
}

std::string trace_shape_mismatch(const traces::TraceShape& shape, const Architecture& arch) {
  if (shape.layers == arch.moe_layers && shape.num_experts == arch.num_experts && shape.top_k == arch.top_k) return "";
  return "expected a trace of " + arch.name + "'s routing (MoE layers " + common::describe_ranges(arch.moe_layers) +
         ", " + std::to_string(arch.num_experts) + " experts, top-" + std::to_string(arch.top_k) + "), got one of " +
         common::quoted(shape.architecture) + " (MoE layers " + common::describe_ranges(shape.layers) + ", " +
         std::to_string(shape.num_experts) + " experts, top-" + std::to_string(shape.top_k) + ")";
}

Architecture parse_architecture(const YamlNode& root, const std::string& name) {
  check_config_kind(root, "architecture");
  root.allow_keys({"schema_version", "kind", "num_layers", "hidden_size", "dense_ffn_size", "vocab_size", "dtype",
                   "activation", "moe", "attention"});
  check_config_header(root, "architecture");

  Architecture arch;
  arch.name = name;
  arch.num_layers = read_int(root.at("num_layers"), 1, kMaxLayers);
  arch.hidden_size = read_int(root.at("hidden_size"), 1, kMaxWidth);
  arch.vocab_size = read_int(root.at("vocab_size"), 1, kMaxVocab);
  arch.dtype = *common::enum_from_name<Dtype>(kDtypes, root.at("dtype").as_enum(model_dtype_names()));
  arch.activation = root.at("activation").as_enum({"swiglu", "gelu"});
  arch.ffn_projections = arch.activation == "swiglu" ? 3 : 2;
  arch.attention = parse_attention(root.at("attention"));
  if (auto moe = root.find("moe")) parse_moe(*moe, arch);

  const bool has_dense_layer = static_cast<int>(arch.moe_layers.size()) < arch.num_layers;
  auto dense_ffn = root.find("dense_ffn_size");
  if (has_dense_layer) {
    int first_dense = 0;
    while (std::binary_search(arch.moe_layers.begin(), arch.moe_layers.end(), first_dense)) ++first_dense;
    arch.dense_ffn_size =
        read_int(at_because(root, "dense_ffn_size",
                            "layer " + std::to_string(first_dense) + " is dense: it is not in moe.layers"),
                 1, kMaxWidth);
  } else if (dense_ffn) {
    dense_ffn->fail(
        "expected no dense_ffn_size when every layer is an MoE layer, got one (remove it, or list "
        "fewer moe.layers)");
  }
  return arch;
}

Architecture load_architecture(const std::string& name_or_path, const std::vector<std::string>& overrides) {
  const std::filesystem::path path = common::resolve_config("architectures", name_or_path);
  common::YamlDocument doc = common::YamlDocument::load_file(path.string());
  doc.apply_overrides(overrides);
  Architecture arch = parse_architecture(doc.root(), path.stem().string());
  arch.source_file = path.string();
  return arch;
}

}  // namespace moesim::models
