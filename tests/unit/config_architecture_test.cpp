#include <doctest/doctest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/yaml.hpp"
#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "tests/support/test_support.hpp"

using moesim::testing::error_of;

using moesim::common::InputError;
using moesim::common::UsageError;
using moesim::common::YamlDocument;
using moesim::models::Architecture;
using moesim::models::Dtype;
using moesim::models::load_architecture;
using moesim::models::parse_architecture;

namespace fs = std::filesystem;

namespace {


Architecture parse(const std::string& text) {
  auto doc = YamlDocument::load_string(text, "a.yaml");
  return parse_architecture(doc.root(), "a");
}

std::string parse_error(const std::string& text) {
  return error_of([&] { parse(text); });
}

// A valid MoE architecture; tests change one line of it.
const std::string kMoe = R"(schema_version: 1
kind: architecture
num_layers: 8
hidden_size: 1024
dense_ffn_size: 4096
vocab_size: 1000
dtype: bf16
activation: swiglu
moe:
  layers: ["5..6", 0, 2]
  num_experts: 16
  expert_ffn_size: 512
  top_k: 4
attention:
  kind: gqa
  num_heads: 16
  num_kv_heads: 4
  head_dim: 64
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, from);
  return text.replace(at, from.size(), to);
}

fs::path bad(const std::string& name) { return moesim::testing::test_data_dir() / "configs" / (name + ".yaml"); }

struct BadCase {
  std::string file;      // under tests/data/configs, without .yaml
  std::string position;  // line:col the message must give
  std::string key_path;  // "" for mistakes of the YAML text itself
  std::string fragment;  // part of the rest of the message
};

// One file per mistake: the message must start with `file:line:col: key.path: `.
const std::vector<BadCase> kBadArchitectures = {
    {"bad_arch_unknown_key", "5:1", "hiden_size", "unknown key (did you mean \"hidden_size\"?)"},
    {"bad_arch_nested_unknown_key", "11:3", "moe.num_expert", "unknown key (did you mean \"num_experts\"?)"},
    {"bad_arch_missing_key", "2:1", "vocab_size", "required key \"vocab_size\" is missing"},
    {"bad_arch_wrong_type", "4:13", "num_layers", "expected an integer between 1 and 100000, got \"thirty-two\""},
    {"bad_arch_map_expected", "14:12", "attention", "expected a map of keys, got \"gqa\""},
    {"bad_arch_out_of_range", "5:14", "hidden_size", "expected an integer between 1 and 4194304, got \"0\""},
    {"bad_arch_bad_enum", "8:13", "activation", "got \"swiglue\" (did you mean \"swiglu\"?)"},
    {"bad_arch_wrong_kind", "3:7", "kind", "expected \"architecture\""},
    {"bad_arch_schema_version", "2:17", "schema_version", "expected schema version 1"},
    {"bad_arch_top_k_above_experts", "13:10", "moe.top_k", "expected at most num_experts (8), got \"9\""},
    {"bad_arch_moe_layer_out_of_range", "10:11", "moe.layers",
     "below num_layers (32; layers count from 0), got \"0..32\""},
    {"bad_arch_duplicate_moe_layer", "10:23", "moe.layers[2]", "got layer 4 again (already in moe.layers[1])"},
    {"bad_arch_bad_layer_range", "10:11", "moe.layers", "got \"31..0\""},
    {"bad_arch_routing_groups", "14:19", "moe.routing_groups", "expected a divisor of num_experts (8), got \"3\""},
    {"bad_arch_kv_heads", "17:17", "attention.num_kv_heads", "expected a divisor of num_heads (32), got \"6\""},
    {"bad_arch_attention_key_for_other_kind", "19:17", "attention.kv_lora_rank", "a key of kind mla"},
    {"bad_arch_dense_ffn_missing", "2:1", "dense_ffn_size", "(layer 0 is dense: it is not in moe.layers)"},
    {"bad_arch_shared_ffn_missing", "10:3", "moe.shared_expert_ffn_size", "(moe.shared_experts is 1"},
};

// Mistakes in the YAML text itself, the same whatever kind of config the file is.
const std::vector<BadCase> kBadYaml = {
    {"bad_yaml_duplicate_key", "6:1", "", "duplicate key \"hidden_size\""},
    {"bad_yaml_anchor", "4:13", "", "YAML anchors (&name) are not allowed"},
    {"bad_yaml_tab", "11:1", "", "tab character in indentation"},
    {"bad_yaml_empty", "", "", "empty file"},
    {"bad_yaml_scalar_root", "2:1", "", "the top level must be a map of keys, got \"mixtral-8x7b\""},
    {"bad_yaml_list_root", "2:1", "", "the top level must be a map of keys, got a list"},
    {"bad_yaml_syntax", "11:14", "", "YAML syntax error"},
    {"bad_yaml_too_deep", "4:44", "", "nested deeper than 32 levels"},
    {"bad_yaml_binary", "3:12", "", "binary byte 0x00"},
};

void check_bad(const BadCase& c, const std::string& message) {
  const std::string path = bad(c.file).string();
  std::string prefix = path + (c.position.empty() ? "" : ":" + c.position) + ": ";
  if (!c.key_path.empty()) prefix += c.key_path + ": ";
  CHECK_MESSAGE(message.rfind(prefix, 0) == 0, "expected prefix: " << prefix << "\n     got: " << message);
  CHECK_MESSAGE(message.find(c.fragment) != std::string::npos, "expected: " << c.fragment << "\n     got: " << message);
}

}  // namespace

TEST_CASE("architecture: a valid MoE file becomes the struct, layers sorted") {
  const Architecture a = parse(kMoe);
  CHECK(a.name == "a");
  CHECK(a.num_layers == 8);
  CHECK(a.moe_layers == std::vector<int>{0, 2, 5, 6});
  CHECK(a.is_moe());
  CHECK(a.hidden_size == 1024);
  CHECK(a.dense_ffn_size == 4096);
  CHECK(a.num_experts == 16);
  CHECK(a.expert_ffn_size == 512);
  CHECK(a.top_k == 4);
  CHECK(a.num_shared_experts == 0);
  CHECK(a.routing_groups == 1);
  CHECK(a.topk_groups == 1);
  CHECK(a.activation == "swiglu");
  CHECK(a.ffn_projections == 3);
  CHECK(a.attention.kind == "gqa");
  CHECK(a.attention.num_heads == 16);
  CHECK(a.attention.num_kv_heads == 4);
  CHECK(a.attention.head_dim == 64);
  CHECK(a.vocab_size == 1000);
  CHECK(a.dtype == Dtype::kBf16);
  // tf32 is a GEMM mode of fp32 data, not a model's dtype: a profile's dtypes less tf32.
  CHECK(parse_error(replace(kMoe, "dtype: bf16", "dtype: tf32"))
            .find("dtype: expected one of bf16, fp16, fp8, fp32, got \"tf32\"") != std::string::npos);

  const auto shape = a.trace_shape();
  CHECK(shape.architecture == "a");
  CHECK(shape.layers == a.moe_layers);
  CHECK(shape.num_experts == 16);
  CHECK(shape.top_k == 4);
}

TEST_CASE("architecture: a dense model has no moe section; gelu has two projections") {
  const std::string dense = R"(schema_version: 1
kind: architecture
num_layers: 4
hidden_size: 256
dense_ffn_size: 1024
vocab_size: 100
dtype: fp16
activation: gelu
attention: {kind: mha, num_heads: 4, head_dim: 64}
)";
  const Architecture a = parse(dense);
  CHECK(a.dtype == Dtype::kFp16);
  CHECK_FALSE(a.is_moe());
  CHECK(a.trace_shape().layers.empty());
  CHECK(a.ffn_projections == 2);
  CHECK(a.attention.num_kv_heads == 4);  // mha: one key/value head per head
  // Without dense_ffn_size a dense model has no FFN size at all.
  CHECK(parse_error(replace(dense, "dense_ffn_size: 1024\n", "")).find("dense_ffn_size: required key") !=
        std::string::npos);
}

TEST_CASE("architecture: MLA attention and group-limited routing") {
  std::string text = replace(kMoe, "  top_k: 4\n", "  top_k: 4\n  routing_groups: 4\n  topk_groups: 2\n");
  text = replace(text, "  kind: gqa\n  num_heads: 16\n  num_kv_heads: 4\n  head_dim: 64\n",
                 "  kind: mla\n  num_heads: 16\n  kv_lora_rank: 512\n  qk_nope_head_dim: 128\n  qk_rope_head_dim: 64\n"
                 "  v_head_dim: 128\n");
  const Architecture a = parse(text);
  CHECK(a.routing_groups == 4);
  CHECK(a.topk_groups == 2);
  CHECK(a.attention.kind == "mla");
  CHECK(a.attention.q_lora_rank == 0);  // absent: queries are not low-rank
  CHECK(a.attention.kv_lora_rank == 512);
  CHECK(a.attention.qk_nope_head_dim == 128);
  CHECK(a.attention.qk_rope_head_dim == 64);
  CHECK(a.attention.v_head_dim == 128);
  CHECK(a.attention.num_kv_heads == 16);

  // 4 groups of 4 experts, a token limited to 1 group can reach only 4 experts: top-4 is the most.
  CHECK(parse_error(replace(text, "topk_groups: 2", "topk_groups: 1")).empty());
  const std::string too_few = replace(replace(text, "topk_groups: 2", "topk_groups: 1"), "top_k: 4", "top_k: 5");
  CHECK(parse_error(too_few).rfind("a.yaml:15:16: moe.topk_groups: expected enough groups for top_k (5 experts)", 0) ==
        0);
  CHECK(parse_error(replace(text, "  topk_groups: 2\n", "")).find("moe: expected topk_groups") != std::string::npos);
  CHECK(parse_error(replace(text, "topk_groups: 2", "topk_groups: 5")).rfind("a.yaml:15:16: moe.topk_groups: ", 0) ==
        0);
}

TEST_CASE("architecture: cross-field checks") {
  // MHA with fewer key/value heads is GQA.
  CHECK(parse_error(replace(kMoe, "  kind: gqa", "  kind: mha"))
            .rfind("a.yaml:17:17: attention.num_kv_heads: expected num_kv_heads equal to num_heads (16)", 0) == 0);
  // Every layer MoE: a dense FFN size would describe nothing.
  CHECK(parse_error(replace(kMoe, R"(["5..6", 0, 2])", R"("0..7")"))
            .rfind("a.yaml:5:17: dense_ffn_size: expected no dense_ffn_size when every layer is an MoE layer", 0) == 0);
  CHECK(parse_error(replace(kMoe, R"(["5..6", 0, 2])", "[]"))
            .rfind("a.yaml:10:11: moe.layers: expected at least one", 0) == 0);
  CHECK(parse_error(replace(kMoe, R"(["5..6", 0, 2])", R"(["5..6", 0, "6..7"])"))
            .find("moe.layers[2]: expected each layer listed once, got layer 6 again (already in moe.layers[0])") !=
        std::string::npos);
  CHECK(parse_error(replace(kMoe, R"(["5..6", 0, 2])", "[-1]")).find("moe.layers[0]: expected a layer index") !=
        std::string::npos);
  CHECK(parse_error(replace(kMoe, R"(["5..6", 0, 2])", "{a: 1}")).find("moe.layers: expected a layer index") !=
        std::string::npos);
  CHECK(parse_error(replace(kMoe, "  top_k: 4\n", "  top_k: 4\n  shared_expert_ffn_size: 64\n"))
            .find("moe.shared_expert_ffn_size: expected no shared_expert_ffn_size without shared experts") !=
        std::string::npos);
  CHECK(
      parse_error(replace(kMoe, "  top_k: 4", "  top_k: 65")).find("moe.top_k: expected an integer between 1 and 64") !=
      std::string::npos);
}

TEST_CASE("architecture: each bad file reports file:line:col: key.path") {
  for (const BadCase& c : kBadArchitectures) {
    CAPTURE(c.file);
    check_bad(c, error_of([&] { load_architecture(bad(c.file).string()); }));
  }
}

TEST_CASE("config files: strict-YAML mistakes are reported with file:line:col by every loader") {
  for (const BadCase& c : kBadYaml) {
    CAPTURE(c.file);
    const std::string as_architecture = error_of([&] { load_architecture(bad(c.file).string()); });
    check_bad(c, as_architecture);
    CHECK(error_of([&] { moesim::models::load_cluster(bad(c.file).string()); }) == as_architecture);
  }
}

TEST_CASE("config files: every bad_arch_ and bad_yaml_ file has an expected message") {
  std::set<std::string> covered;
  for (const auto& c : kBadArchitectures) covered.insert(c.file);
  for (const auto& c : kBadYaml) covered.insert(c.file);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(moesim::testing::test_data_dir() / "configs")) {
    const std::string stem = entry.path().stem().string();
    if (!stem.starts_with("bad_arch_") && !stem.starts_with("bad_yaml_")) continue;
    ++files;
    CHECK_MESSAGE(covered.count(stem) == 1, stem << " has no expected message in this test");
  }
  CHECK(files == static_cast<int>(covered.size()));
}

TEST_CASE("architecture: --set overrides change values and are named in errors") {
  const Architecture plain = load_architecture("mixtral-8x7b");
  const Architecture changed = load_architecture("mixtral-8x7b", {"hidden_size=1024", "moe.top_k=1"});
  CHECK(plain.hidden_size == 4096);
  CHECK(changed.hidden_size == 1024);
  CHECK(changed.top_k == 1);
  CHECK(changed.num_experts == plain.num_experts);

  CHECK(error_of([] {
          load_architecture("mixtral-8x7b", {"bogus=1"});
        }).rfind("--set bogus=1: bogus: unknown key", 0) == 0);
  CHECK(error_of([] { load_architecture("mixtral-8x7b", {"moe.top_k=9"}); }) ==
        "--set moe.top_k=9: moe.top_k: expected at most num_experts (8), got \"9\"");
  CHECK(error_of([] {
          load_architecture("mixtral-8x7b", {"moe.layers=0..32"});
        }).rfind("--set moe.layers=0..32: moe.layers: expected layer indices below num_layers (32", 0) == 0);
}

TEST_CASE("architecture: a config is given by name or by path") {
  const Architecture by_name = load_architecture("deepseek-v2-lite");
  CHECK(by_name.name == "deepseek-v2-lite");
  CHECK(fs::path(by_name.source_file).filename() == "deepseek-v2-lite.yaml");
  CHECK(fs::path(by_name.source_file).parent_path().filename() == "architectures");

  // A copy under another name: the name is the file stem.
  moesim::testing::TempDir tmp;
  fs::copy_file(by_name.source_file, tmp / "my-model.yaml");
  const Architecture by_path = load_architecture((tmp / "my-model.yaml").string());
  CHECK(by_path.name == "my-model");
  CHECK(by_path.moe_layers == by_name.moe_layers);
  CHECK(by_path.hidden_size == by_name.hidden_size);

  const std::string unknown = error_of([] { load_architecture("mixtral-8x7"); });
  CHECK(unknown.find("unknown architecture \"mixtral-8x7\" (did you mean \"mixtral-8x7b\"?)") != std::string::npos);
  CHECK(unknown.find("deepseek-v3") != std::string::npos);  // the valid names are listed
  CHECK(error_of([&] { load_architecture((tmp / "absent.yaml").string()); }).find("no such file") != std::string::npos);
}
