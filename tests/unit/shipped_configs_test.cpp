#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/files.hpp"
#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "sim/study/study_file.hpp"
#include "tests/support/test_support.hpp"
#include "traces/generate.hpp"
#include "traces/trace.hpp"

using moesim::models::Architecture;
using moesim::models::Cluster;
using moesim::models::load_architecture;
using moesim::models::load_cluster;

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> yaml_files(const std::string& kind) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(moesim::testing::source_dir() / "configs" / kind))
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// What architectures.md gives for each model (transcribed; the shared-data test below re-reads the file).
struct Published {
  std::string name;
  int layers;
  int first_moe_layer;
  int moe_layers;
  int hidden;
  int experts;
  int expert_ffn;
  int top_k;
};

const std::vector<Published> kPublished = {
    {"mixtral-8x7b", 32, 0, 32, 4096, 8, 14336, 2}, {"deepseek-v2-lite", 27, 1, 26, 2048, 64, 1408, 6},
    {"deepseek-v3", 61, 3, 58, 7168, 256, 2048, 8}, {"qwen3-30b-a3b", 48, 0, 48, 2048, 128, 768, 8},
    {"olmoe-1b-7b", 16, 0, 16, 2048, 64, 1024, 8},
};

// The cells of one row of a markdown table ("| hidden size | 4096 | ..." -> {"hidden size", "4096", ...}).
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  std::getline(ss, cell, '|');  // before the first bar
  while (std::getline(ss, cell, '|')) {
    const auto b = cell.find_first_not_of(' ');
    const auto e = cell.find_last_not_of(' ');
    out.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
  }
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

int leading_int(const std::string& s) { return std::stoi(s); }

}  // namespace

TEST_CASE("shipped configs: every architecture file loads and validates") {
  const auto files = yaml_files("architectures");
  CHECK(files.size() >= 7);
  for (const fs::path& file : files) {
    CAPTURE(file);
    Architecture a;
    REQUIRE_NOTHROW(a = load_architecture(file.string()));
    CHECK(a.name == file.stem().string());
    // By name it resolves to the same file.
    CHECK(load_architecture(a.name).hidden_size == a.hidden_size);
    const auto shape = a.trace_shape();
    CHECK(shape.layers == a.moe_layers);
    CHECK(std::is_sorted(shape.layers.begin(), shape.layers.end()));
  }
  const auto names = moesim::common::config_names("architectures");
  for (const char* required :
       {"mixtral-8x7b", "deepseek-v2-lite", "deepseek-v3", "qwen3-30b-a3b", "olmoe-1b-7b", "gpt3-13b", "llama2-13b"})
    CHECK_MESSAGE(contains(names, required), required);
}

TEST_CASE("shipped configs: every cluster file loads and validates") {
  const auto files = yaml_files("clusters");
  CHECK(files.size() >= 5);
  for (const fs::path& file : files) {
    CAPTURE(file);
    Cluster c;
    REQUIRE_NOTHROW(c = load_cluster(file.string()));
    CHECK(c.name == file.stem().string());
    CHECK(c.total_gpus() >= 1);
    for (int g = 0; g < c.total_gpus(); ++g) CHECK(c.nic_share(g) > 0.0);
  }
  const auto names = moesim::common::config_names("clusters");
  for (const char* required :
       {"h100-sxm-8gpu", "h200-2x8-800g", "h200-2x8-400g-per-gpu", "h100-sxm-4gpu", "a100-sxm-4gpu"})
    CHECK_MESSAGE(contains(names, required), required);
}

TEST_CASE("shipped configs: MoE architectures match the published figures") {
  for (const Published& p : kPublished) {
    CAPTURE(p.name);
    const Architecture a = load_architecture(p.name);
    CHECK(a.num_layers == p.layers);
    REQUIRE(static_cast<int>(a.moe_layers.size()) == p.moe_layers);
    CHECK(a.moe_layers.front() == p.first_moe_layer);
    CHECK(a.moe_layers.back() == p.layers - 1);
    CHECK(a.hidden_size == p.hidden);
    CHECK(a.num_experts == p.experts);
    CHECK(a.expert_ffn_size == p.expert_ffn);
    CHECK(a.top_k == p.top_k);
    CHECK(a.ffn_projections == 3);
  }
  const Architecture v3 = load_architecture("deepseek-v3");
  CHECK(v3.routing_groups == 8);
  CHECK(v3.topk_groups == 4);
  CHECK(v3.num_shared_experts == 1);
  CHECK(v3.dense_ffn_size == 18432);
  CHECK(v3.attention.kind == "mla");
  CHECK(v3.attention.q_lora_rank == 1536);
  const Architecture lite = load_architecture("deepseek-v2-lite");
  CHECK(lite.num_shared_experts == 2);
  CHECK(lite.shared_expert_ffn_size == 1408);
  CHECK(lite.attention.q_lora_rank == 0);
  CHECK(load_architecture("mixtral-8x7b").attention.num_kv_heads == 8);
  CHECK(load_architecture("qwen3-30b-a3b").attention.num_kv_heads == 4);
}

TEST_CASE("shipped configs: the dense models of the overlap paper") {
  const Architecture gpt3 = load_architecture("gpt3-13b");
  CHECK_FALSE(gpt3.is_moe());
  CHECK(gpt3.num_layers == 40);
  CHECK(gpt3.hidden_size == 5120);  // Megatron's figure, not the GPT-3 table's 5140 (see the file)
  CHECK(gpt3.hidden_size == gpt3.attention.num_heads * gpt3.attention.head_dim);
  CHECK(gpt3.dense_ffn_size == 4 * gpt3.hidden_size);
  CHECK(gpt3.ffn_projections == 2);
  CHECK(gpt3.vocab_size == 50257);
  const Architecture llama = load_architecture("llama2-13b");
  CHECK_FALSE(llama.is_moe());
  CHECK(llama.hidden_size == 5120);
  CHECK(llama.dense_ffn_size == 13824);
  CHECK(llama.ffn_projections == 3);
  CHECK(llama.attention.num_kv_heads == 40);
}

TEST_CASE("shipped configs: architectures agree with reference/architectures.md") {
  std::ifstream in(moesim::testing::reference_dir() / "architectures.md");
  REQUIRE(in);
  // The first table: a header row of model names, then one row per field.
  std::map<std::string, std::vector<std::string>> rows;
  std::vector<std::string> models;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("|", 0) != 0) {
      if (!models.empty()) break;
      continue;
    }
    auto c = cells(line);
    if (models.empty()) {
      models.assign(c.begin() + 1, c.end());
      continue;
    }
    rows[c.front()] = std::vector<std::string>(c.begin() + 1, c.end());
  }
  REQUIRE(models.size() == kPublished.size());
  for (const char* row :
       {"decoder layers", "MoE layers", "hidden size", "routed experts per MoE layer", "expert FFN size", "top-k"})
    REQUIRE_MESSAGE(rows[row].size() == models.size(), row);
  for (std::size_t m = 0; m < models.size(); ++m) {
    const Published& p = kPublished[m];
    CAPTURE(models[m]);
    CAPTURE(p.name);
    const Architecture a = load_architecture(p.name);
    CHECK(a.num_layers == leading_int(rows["decoder layers"][m]));
    CHECK(a.hidden_size == leading_int(rows["hidden size"][m]));
    CHECK(a.num_experts == leading_int(rows["routed experts per MoE layer"][m]));
    CHECK(a.expert_ffn_size == leading_int(rows["expert FFN size"][m]));
    CHECK(a.top_k == leading_int(rows["top-k"][m]));
    // "1..26 (layer 0 dense)": the first and last MoE layer.
    const std::string& range = rows["MoE layers"][m];
    const auto dots = range.find("..");
    REQUIRE(dots != std::string::npos);
    CHECK(a.moe_layers.front() == leading_int(range));
    CHECK(a.moe_layers.back() == leading_int(range.substr(dots + 2)));
    CHECK(static_cast<int>(a.moe_layers.size()) == a.moe_layers.back() - a.moe_layers.front() + 1);
  }
}

TEST_CASE("shipped configs: the MoETuner and overlap-paper clusters") {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const Cluster h100 = load_cluster("h100-sxm-8gpu");
  CHECK(h100.total_gpus() == 8);
  CHECK(h100.gpu_kind == "h100-sxm");
  CHECK(h100.gpu_memory == doctest::Approx(80 * kGiB));
  CHECK(h100.bandwidth_between(0, 7) == doctest::Approx(450e9));  // NVLink4: 900 GB/s both ways
  CHECK(h100.nics.per_node == 8);
  for (int g = 0; g < 8; ++g) CHECK(h100.nic_of(g) == g);
  CHECK(h100.nic_share(0) == doctest::Approx(50e9));  // 400 Gb/s

  const Cluster h200 = load_cluster("h200-2x8-800g");
  CHECK(h200.total_gpus() == 16);
  CHECK(h200.gpu_memory == doctest::Approx(141 * kGiB));
  CHECK(h200.node_of(8) == 1);
  CHECK(h200.nics.per_node == 1);
  CHECK(h200.gpus_on_nic(0) == 8);
  CHECK(h200.nics.bandwidth == doctest::Approx(100e9));  // 800 Gb/s per node
  // The paper: inter-node bandwidth about 9x below NVLink's 900 GB/s.
  CHECK(2 * h200.intra_node.bandwidth / h200.nics.bandwidth == doctest::Approx(9.0));
  CHECK(h200.bandwidth_between(0, 8) == doctest::Approx(12.5e9));

  const Cluster dgx = load_cluster("h200-2x8-400g-per-gpu");
  CHECK(dgx.total_gpus() == 16);
  CHECK(dgx.nics.per_node == 8);
  CHECK(dgx.bandwidth_between(3, 11) == doctest::Approx(50e9));
  CHECK(dgx.nics.bandwidth * dgx.nics.per_node == doctest::Approx(4 * h200.nics.bandwidth));

  const Cluster h100x4 = load_cluster("h100-sxm-4gpu");
  CHECK(h100x4.total_gpus() == 4);
  CHECK(h100x4.bandwidth_between(0, 3) == doctest::Approx(150e9));
  const Cluster a100x4 = load_cluster("a100-sxm-4gpu");
  CHECK(a100x4.gpu_kind == "a100-sxm");
  CHECK(a100x4.bandwidth_between(0, 3) == doctest::Approx(100e9));  // NVLink3: 600 GB/s both ways over 3 peers
}

TEST_CASE("shipped configs: every study and paper study loads, with the paper traces generated") {
  // The paper studies replay traces that tools/paper-traces.sh writes to out/paper-traces (not
  // shipped): a copy of each study at the same depth of a scratch tree, with short traces of the same
  // model there and traces/ linked to the source tree's, resolves every relative path as in the
  // checkout.
  moesim::testing::TempDir dir;
  fs::create_directories(dir / "out" / "paper-traces");
  fs::create_directory_symlink(moesim::testing::source_dir() / "traces", dir / "traces");
  moesim::traces::SyntheticParams p;
  p.shape = load_architecture("mixtral-8x7b").trace_shape();
  p.tokens = 2048;
  p.layer_shares = moesim::traces::load_expert_count_shares(
      (moesim::testing::source_dir() / "traces/data/olmoe-mixtral-counts/mistral/expert_counts/wikipedia.json").string(),
      p.shape);
  for (const char* name : {"mixtral-wiki-a0", "mixtral-wiki-a0.3", "mixtral-wiki-a0.6", "mixtral-wiki-hot"}) {
    const std::string path = (dir / "out" / "paper-traces" / (std::string(name) + ".mtr")).string();
    auto w = moesim::traces::create_trace_writer(path, moesim::traces::synthetic_meta(p),
                                                 moesim::traces::Encoding::kBinary, false);
    moesim::traces::generate_synthetic(p, *w);
    w->finish();
  }
  // configs/studies/rebalance.yaml's second phase (tools/rebalance-traces.sh): a short trace of the
  // same model.
  fs::create_directories(dir / "out" / "rebalance-traces");
  moesim::traces::SyntheticParams q;
  q.shape = load_architecture("deepseek-v2-lite").trace_shape();
  q.tokens = 2048;
  auto drift = moesim::traces::create_trace_writer((dir / "out" / "rebalance-traces" / "intent-shift.mtr").string(),
                                                   moesim::traces::synthetic_meta(q), moesim::traces::Encoding::kBinary,
                                                   false);
  moesim::traces::generate_synthetic(q, *drift);
  drift->finish();
  std::size_t papers = 0;
  for (const char* kind : {"studies", "papers"}) {
    fs::create_directories(dir / "configs" / kind);
    for (const fs::path& file : yaml_files(kind)) {
      CAPTURE(file);
      const fs::path copy = dir / "configs" / kind / file.filename();
      fs::copy_file(file, copy);
      moesim::sim::Study study;
      REQUIRE_NOTHROW(study = moesim::sim::load_study(copy.string()));
      CHECK(study.name == file.stem().string());
      CHECK(study.variants.size() >= 1);
      if (std::string(kind) == "papers") ++papers;
    }
  }
  CHECK(papers >= 5);
}
