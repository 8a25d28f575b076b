// Exports for serving engines (sim/placement/export.hpp): the SGLang and vllm-ascend files checked against
// their loaders' contracts, the vLLM / Megatron-Core options (or refusals) and the checkpoint permutation,
// which must turn the engines' contiguous layout into the solved placement and leave the router's choice
// unchanged.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>

#include "common/error.hpp"
#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "sim/placement/evaluate.hpp"
#include "sim/placement/export.hpp"
#include "sim/placement/placement.hpp"
#include "sim/placement/policy.hpp"
#include "sim/placement/routing_counts.hpp"
#include "tests/support/test_support.hpp"
#include "traces/trace.hpp"

using namespace moesim;
namespace fs = std::filesystem;

namespace {

std::string export_data(const std::string& name) {
  return (testing::test_data_dir() / "placements" / "export" / name).string();
}

sim::RoutingCounts shipped_counts() {
  auto reader = traces::open_trace((testing::source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string());
  return sim::count_routing(*reader, std::string(64, 'a'));
}

sim::Placement solve(const std::string& policy, const models::Architecture& arch, int ep,
                     const sim::RoutingCounts* routing = nullptr, int replicas = 0) {
  const auto registry = sim::default_placement_registry();
  sim::PlacementInput input{arch, models::load_cluster("h100-sxm-8gpu"), ep, 1, routing, {}};
  input.options.replicas = replicas;
  return registry.create(policy)->place(input);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The message of the InputError that `f` throws ("" when it throws none).
template <typename F>
std::string input_error(F f) {
  try {
    f();
  } catch (const common::InputError& e) {
    return e.what();
  }
  return "";
}

// SGLang's loader contract for `--init-expert-location FILE.json` (sgl-project/sglang at commit
// 01fec5c2e61f9568c41a6e1d4fd5ac46c88504f1, python/sglang/srt/eplb/expert_location.py):
// - compute_initial_expert_location_metadata calls ExpertLocationMetadata.init_by_mapping(server_args,
//   model_config, **data_dict): `physical_to_logical_map` must be the object's only key;
// - _init_common: num_physical_experts = num_logical_experts + ep_num_redundant_experts, and
//   `assert num_physical_experts % ep_size == 0`; _compute_logical_to_all_physical_map indexes
//   [layer][logical] with every value, so each must be a logical expert id;
// - _compute_gpu_id_of_physical_expert: slot s is on GPU s // num_local_physical_experts;
// - compute_logical_to_rank_dispatch_physical_map (static dispatch) draws from every logical expert's
//   copies (_fair_choices divides by their count): every logical expert must appear in every row;
// - ModelConfigForExpertLocation.num_layers = config.num_hidden_layers (get_model_config_for_expert_location
//   in python/sglang/srt/models/deepseek_v2.py and the Qwen MoE models), and the MoE blocks read their
//   row by decoder layer_id (ExpertLocationDispatchInfo.init_new(layer_id=self.layer_id)): one row per
//   decoder layer, dense ones included; init_trivial fills a row with p % num_logical_experts.
void check_sglang_contract(const sim::PlacementExport& e, const sim::Placement& p, const models::Architecture& arch,
                           const std::string& output) {
  REQUIRE(e.file.is_object());
  CHECK(e.file.size() == 1);
  REQUIRE(e.file.contains("physical_to_logical_map"));
  const auto rows = e.file["physical_to_logical_map"].get<std::vector<std::vector<int>>>();
  REQUIRE(rows.size() == static_cast<std::size_t>(arch.num_layers));
  // The redundant count printed for --ep-num-redundant-experts gives the row length.
  const auto flag = std::find_if(e.flags.begin(), e.flags.end(),
                                 [](const std::string& f) { return f.rfind("--ep-num-redundant-experts ", 0) == 0; });
  REQUIRE(flag != e.flags.end());
  const std::size_t redundant = std::stoul(flag->substr(std::string("--ep-num-redundant-experts ").size()));
  const std::size_t experts = static_cast<std::size_t>(arch.num_experts);
  const std::size_t physical = experts + redundant;
  const std::size_t ep = static_cast<std::size_t>(p.ep);
  REQUIRE(physical % ep == 0);
  const std::size_t local = physical / ep;
  CHECK(std::find(e.flags.begin(), e.flags.end(), "--ep-size " + std::to_string(p.ep)) != e.flags.end());
  CHECK(std::find(e.flags.begin(), e.flags.end(), "--init-expert-location " + output) != e.flags.end());
  for (std::size_t d = 0; d < rows.size(); ++d) {
    INFO("decoder layer " << d);
    REQUIRE(rows[d].size() == physical);
    std::set<int> present(rows[d].begin(), rows[d].end());
    CHECK(present.size() == experts);
    CHECK(*present.begin() == 0);
    CHECK(*present.rbegin() == static_cast<int>(experts) - 1);
    const auto moe = std::find(p.layers.begin(), p.layers.end(), static_cast<int>(d));
    if (moe == p.layers.end()) {
      for (std::size_t s = 0; s < physical; ++s) CHECK(rows[d][s] == static_cast<int>(s % experts));
      continue;
    }
    // Each GPU's slots hold exactly the experts the placement puts on that rank.
    const std::size_t l = static_cast<std::size_t>(moe - p.layers.begin());
    for (int r = 0; r < p.ep; ++r) {
      std::vector<int> slots(rows[d].begin() + static_cast<long>(static_cast<std::size_t>(r) * local),
                             rows[d].begin() + static_cast<long>(static_cast<std::size_t>(r + 1) * local));
      std::sort(slots.begin(), slots.end());
      CHECK(slots == p.experts_on(l, r));
    }
  }
}

// The contiguous layout after permuting the checkpoint by `order`: position j (old expert order[l][j])
// sits on rank j / (E / EP). Returns, per layer and old expert, its ranks.
std::vector<std::vector<std::vector<int>>> permuted_contiguous(const std::vector<std::vector<int>>& order, int ep) {
  std::vector<std::vector<std::vector<int>>> ranks(order.size());
  for (std::size_t l = 0; l < order.size(); ++l) {
    const std::size_t per_rank = order[l].size() / static_cast<std::size_t>(ep);
    ranks[l].resize(order[l].size());
    for (std::size_t j = 0; j < order[l].size(); ++j)
      ranks[l][static_cast<std::size_t>(order[l][j])] = {static_cast<int>(j / per_rank)};
  }
  return ranks;
}

// A router: scores = W x, softmax, top-k; with groups > 1, DeepSeek-style group-limited routing (a
// group's score is the sum of its two best experts; only the best `topk_groups` groups compete). Returns
// the chosen expert ids mapped through `id` (position -> expert) with their weights, sorted.
std::vector<std::pair<int, double>> route(const std::vector<std::vector<double>>& w, const std::vector<double>& x,
                                          int top_k, int groups, int topk_groups, const std::vector<int>& id) {
  const std::size_t e_count = w.size();
  std::vector<double> s(e_count);
  for (std::size_t e = 0; e < e_count; ++e) s[e] = std::inner_product(w[e].begin(), w[e].end(), x.begin(), 0.0);
  const double top = *std::max_element(s.begin(), s.end());
  double sum = 0.0;
  for (double& v : s) sum += (v = std::exp(v - top));
  for (double& v : s) v /= sum;
  std::vector<double> masked = s;
  if (groups > 1) {
    const std::size_t size = e_count / static_cast<std::size_t>(groups);
    std::vector<std::pair<double, int>> group_score;
    for (int g = 0; g < groups; ++g) {
      std::vector<double> in(s.begin() + static_cast<long>(static_cast<std::size_t>(g) * size),
                             s.begin() + static_cast<long>(static_cast<std::size_t>(g + 1) * size));
      std::sort(in.rbegin(), in.rend());
      group_score.push_back({in[0] + in[1], g});
    }
    std::sort(group_score.rbegin(), group_score.rend());
    for (std::size_t i = static_cast<std::size_t>(topk_groups); i < group_score.size(); ++i)
      for (std::size_t e = 0; e < size; ++e) masked[static_cast<std::size_t>(group_score[i].second) * size + e] = -1.0;
  }
  std::vector<std::size_t> pos(e_count);
  std::iota(pos.begin(), pos.end(), 0);
  std::sort(pos.begin(), pos.end(), [&](std::size_t a, std::size_t b) { return masked[a] > masked[b]; });
  std::vector<std::pair<int, double>> out;
  for (int k = 0; k < top_k; ++k)
    out.push_back({id[pos[static_cast<std::size_t>(k)]], s[pos[static_cast<std::size_t>(k)]]});
  std::sort(out.begin(), out.end());
  return out;
}

// Whether routing with the gate rows permuted by `order` picks the same experts with the same weights
// as the original gate, for `tokens` random tokens.
bool routing_unchanged(const std::vector<int>& order, int top_k, int groups, int topk_groups, int tokens) {
  const std::size_t e_count = order.size(), hidden = 16;
  std::mt19937 gen(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::vector<double>> w(e_count, std::vector<double>(hidden));
  for (auto& row : w)
    for (double& v : row) v = normal(gen);
  std::vector<std::vector<double>> permuted(e_count);
  for (std::size_t j = 0; j < e_count; ++j) permuted[j] = w[static_cast<std::size_t>(order[j])];
  std::vector<int> identity(e_count);
  std::iota(identity.begin(), identity.end(), 0);
  for (int t = 0; t < tokens; ++t) {
    std::vector<double> x(hidden);
    for (double& v : x) v = normal(gen);
    const auto a = route(w, x, top_k, groups, topk_groups, identity);
    const auto b = route(permuted, x, top_k, groups, topk_groups, order);
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i].first != b[i].first || std::abs(a[i].second - b[i].second) > 1e-12) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("export sglang: the file init_by_mapping accepts, one row per decoder layer") {
  const auto v2 = models::load_architecture("deepseek-v2-lite");  // 27 decoder layers, layer 0 dense
  const sim::RoutingCounts routing = shipped_counts();
  const sim::Placement eplb = solve("eplb", v2, 8, &routing, 8);
  const auto e = sim::export_placement(eplb, v2, sim::ExportFormat::kSglang, "eplb.yaml", "eplb.json");
  check_sglang_contract(e, eplb, v2, "eplb.json");
  CHECK(e.file["physical_to_logical_map"].size() == 27);
  CHECK(e.file["physical_to_logical_map"][1].size() == 72);  // 64 experts + 8 redundant
  CHECK(std::find(e.flags.begin(), e.flags.end(), "--ep-num-redundant-experts 8") != e.flags.end());
  // MoE layer 1 is row 1, not row 0: the map is indexed by decoder layer.
  CHECK(e.file["physical_to_logical_map"][1] != e.file["physical_to_logical_map"][0]);

  const sim::Placement contiguous = solve("contiguous", v2, 8);
  check_sglang_contract(sim::export_placement(contiguous, v2, sim::ExportFormat::kSglang, "c.yaml", "c.json"),
                        contiguous, v2, "c.json");
  // Every layer MoE (Qwen3-30B-A3B: 48 of 48).
  const auto qwen = models::load_architecture("qwen3-30b-a3b");
  const sim::Placement rr = solve("round_robin", qwen, 8);
  check_sglang_contract(sim::export_placement(rr, qwen, sim::ExportFormat::kSglang, "rr.yaml", "rr.json"), rr, qwen,
                        "rr.json");
  // A hand-made replicated file: 3 slots on each of 4 ranks, 4 redundant.
  const auto hand = sim::load_checked_placement(export_data("replicated_equal.yaml"));
  const auto h = sim::export_placement(hand.placement, hand.arch, sim::ExportFormat::kSglang, hand.path, "h.json");
  check_sglang_contract(h, hand.placement, hand.arch, "h.json");
  CHECK(std::find(h.flags.begin(), h.flags.end(), "--ep-num-redundant-experts 4") != h.flags.end());
}

TEST_CASE("export sglang: uneven slots and TP groups are refused, naming the file") {
  const auto uneven =
      sim::load_checked_placement((testing::test_data_dir() / "placements/good_replicated.yaml").string());
  const std::string what = input_error(
      [&] { sim::export_placement(uneven.placement, uneven.arch, sim::ExportFormat::kSglang, uneven.path, "u.json"); });
  CHECK(contains(what, "good_replicated.yaml: layer 1: rank 1 holds 2 experts, another rank 3"));
  sim::Placement tp2 = sim::load_checked_placement(export_data("replicated_equal.yaml")).placement;
  tp2.tp = 2;
  const auto arch = models::load_architecture((testing::test_data_dir() / "placements/models/tiny-moe.yaml").string());
  CHECK(contains(input_error([&] { sim::export_placement(tp2, arch, sim::ExportFormat::kSglang, "t.yaml", "t.json"); }),
                 "t.yaml: tp 2"));
}

// vllm-ascend's loader (vllm-project/vllm-ascend, vllm_ascend/ops/expert_load_balancer.py):
// ExpertLoadBalancer._expert_file_to_tensor reads moe_layer_count, layer_list[0].device_count and every
// layer's device_list[].device_expert into one torch tensor (rectangular: the same slot count on every
// device of every layer); get_rank_placement_map(moe_instance_id, rank) indexes it by the MoE layer's
// instance counter (AscendFusedMoE.moe_counter, from 0, MoE layers only), and
// get_global_redundant_expert_num is len(device_expert) x device_count - experts.
TEST_CASE("export vllm-ascend: the expert_map_path file, one entry per MoE layer") {
  const auto v2 = models::load_architecture("deepseek-v2-lite");
  const sim::RoutingCounts routing = shipped_counts();
  const sim::Placement p = solve("eplb", v2, 8, &routing, 8);
  const auto e = sim::export_placement(p, v2, sim::ExportFormat::kVllmAscend, "eplb.yaml", "map.json");
  REQUIRE(e.file.size() == 2);
  REQUIRE(e.file["moe_layer_count"] == p.layers.size());
  REQUIRE(e.file["layer_list"].size() == p.layers.size());
  const std::size_t slots = e.file["layer_list"][0]["device_list"][0]["device_expert"].size();
  CHECK(slots * 8 - 64 == 8);  // the redundant experts vllm-ascend infers
  for (std::size_t l = 0; l < p.layers.size(); ++l) {
    const auto& layer = e.file["layer_list"][l];
    CHECK(layer["layer_id"] == l);
    REQUIRE(layer["device_count"] == 8);
    REQUIRE(layer["device_list"].size() == 8);
    for (int r = 0; r < 8; ++r) {
      const auto& device = layer["device_list"][static_cast<std::size_t>(r)];
      CHECK(device["device_id"] == r);
      CHECK(device["device_expert"].size() == slots);
      CHECK(device["device_expert"].get<std::vector<int>>() == p.experts_on(l, r));
    }
  }
  CHECK(std::find(e.flags.begin(), e.flags.end(), "--additional-config '{\"expert_map_path\": \"map.json\"}'") !=
        e.flags.end());
  const auto uneven =
      sim::load_checked_placement((testing::test_data_dir() / "placements/good_replicated.yaml").string());
  CHECK(contains(input_error([&] {
                   sim::export_placement(uneven.placement, uneven.arch, sim::ExportFormat::kVllmAscend, uneven.path,
                                         "u.json");
                 }),
                 "vllm-ascend's expert map"));
}

TEST_CASE("export vllm: the placement strategy that rebuilds the layout, or a refusal") {
  const auto v2 = models::load_architecture("deepseek-v2-lite");
  const auto linear = sim::export_placement(solve("contiguous", v2, 8), v2, sim::ExportFormat::kVllm, "c.yaml", "");
  CHECK(linear.file.is_null());
  CHECK(std::find(linear.flags.begin(), linear.flags.end(), "--expert-placement-strategy linear") !=
        linear.flags.end());
  // DeepSeek-V2-Lite routes without groups: vLLM would fall back from round_robin to linear.
  CHECK(contains(input_error([&] {
                   sim::export_placement(solve("round_robin", v2, 8), v2, sim::ExportFormat::kVllm, "rr.yaml", "");
                 }),
                 "--format permutation"));
  const auto grouped = sim::load_checked_placement(export_data("round_robin_grouped.yaml"));
  const auto rr = sim::export_placement(grouped.placement, grouped.arch, sim::ExportFormat::kVllm, grouped.path, "");
  CHECK(std::find(rr.flags.begin(), rr.flags.end(), "--expert-placement-strategy round_robin") != rr.flags.end());
  // DeepSeek-V3 (8 groups) round-robin, 64 ranks of 4 experts.
  const auto v3 = models::load_architecture("deepseek-v3");
  sim::Placement v3rr;
  v3rr.ep = 64;
  v3rr.layers = v3.moe_layers;
  v3rr.ranks.assign(v3.moe_layers.size(), std::vector<std::vector<int>>(256));
  for (auto& layer : v3rr.ranks)
    for (std::size_t e = 0; e < layer.size(); ++e) layer[e] = {static_cast<int>(e % 64)};
  CHECK_NOTHROW(sim::export_placement(v3rr, v3, sim::ExportFormat::kVllm, "v3.yaml", ""));

  const auto shuffled = sim::load_checked_placement(export_data("shuffled.yaml"));
  CHECK(contains(input_error([&] {
                   sim::export_placement(shuffled.placement, shuffled.arch, sim::ExportFormat::kVllm, shuffled.path,
                                         "");
                 }),
                 "shuffled.yaml: a non-contiguous placement"));
  const auto replicated = sim::load_checked_placement(export_data("replicated_equal.yaml"));
  CHECK(contains(input_error([&] {
                   sim::export_placement(replicated.placement, replicated.arch, sim::ExportFormat::kVllm,
                                         replicated.path, "");
                 }),
                 "--format sglang"));
}

TEST_CASE("export megatron: the contiguous layout only") {
  const auto v2 = models::load_architecture("deepseek-v2-lite");
  const auto m = sim::export_placement(solve("contiguous", v2, 8), v2, sim::ExportFormat::kMegatron, "c.yaml", "");
  CHECK(m.file.is_null());
  CHECK(std::find(m.flags.begin(), m.flags.end(), "--expert-model-parallel-size 8") != m.flags.end());
  // 64 experts on 6 ranks, contiguous (the first 4 ranks hold 11, the others 10): vLLM's linear layout,
  // but Megatron-Core asserts E % EP == 0.
  sim::Placement c6;
  c6.ep = 6;
  c6.layers = v2.moe_layers;
  c6.ranks.assign(v2.moe_layers.size(), std::vector<std::vector<int>>(64));
  for (auto& layer : c6.ranks)
    for (int e = 0; e < 64; ++e) layer[static_cast<std::size_t>(e)] = {e < 44 ? e / 11 : 4 + (e - 44) / 10};
  CHECK(contains(input_error([&] { sim::export_placement(c6, v2, sim::ExportFormat::kMegatron, "c6.yaml", ""); }),
                 "does not divide the 64 experts"));
  const auto linear6 = sim::export_placement(c6, v2, sim::ExportFormat::kVllm, "c6.yaml", "");
  CHECK(std::find(linear6.flags.begin(), linear6.flags.end(), "--expert-placement-strategy linear") !=
        linear6.flags.end());
  c6.ranks[0][43] = {4};  // one expert off the linear layout
  CHECK_THROWS_AS(sim::export_placement(c6, v2, sim::ExportFormat::kVllm, "c6.yaml", ""), common::InputError);
  CHECK(contains(input_error([&] {
                   sim::export_placement(solve("random", v2, 8), v2, sim::ExportFormat::kMegatron, "r.yaml", "");
                 }),
                 "--format permutation"));
  const auto replicated = sim::load_checked_placement(export_data("replicated_equal.yaml"));
  CHECK(contains(input_error([&] {
                   sim::export_placement(replicated.placement, replicated.arch, sim::ExportFormat::kMegatron,
                                         replicated.path, "");
                 }),
                 "replicated_equal.yaml: a replicated placement (layer 1 holds 2 copies of expert 0)"));
}

TEST_CASE("export permutation: the permuted contiguous layout is the placement, and routing is unchanged") {
  const auto v2 = models::load_architecture("deepseek-v2-lite");
  const sim::RoutingCounts routing = shipped_counts();
  std::vector<sim::Placement> placements;
  for (const std::string policy : {"contiguous", "round_robin", "random", "eplb"})
    placements.push_back(solve(policy, v2, 8, &routing));
  placements.push_back(solve("eplb", v2, 4, &routing));
  for (const auto& p : placements) {
    INFO(p.policy << " ep " << p.ep);
    const auto order = sim::contiguous_expert_order(p, v2, "p.yaml");
    REQUIRE(order.size() == p.layers.size());
    for (const auto& o : order) {
      std::vector<int> sorted = o;
      std::sort(sorted.begin(), sorted.end());
      std::vector<int> all(64);
      std::iota(all.begin(), all.end(), 0);
      CHECK(sorted == all);  // a permutation
    }
    CHECK(permuted_contiguous(order, p.ep) == p.ranks);
    CHECK(routing_unchanged(order[0], v2.top_k, 1, 1, 200));
    const auto e = sim::export_placement(p, v2, sim::ExportFormat::kPermutation, "p.yaml", "");
    CHECK(e.file["layers"].size() == p.layers.size());
    CHECK(e.file["layers"][0]["layer"] == p.layers[0]);
    CHECK(e.file["layers"][0]["order"].get<std::vector<int>>() == order[0]);
  }
  // The contiguous placement needs no permutation.
  std::vector<int> identity(64);
  std::iota(identity.begin(), identity.end(), 0);
  CHECK(sim::contiguous_expert_order(placements[0], v2, "c.yaml")[3] == identity);
  // A hand-made shuffle on the tiny model.
  const auto shuffled = sim::load_checked_placement(export_data("shuffled.yaml"));
  const auto order = sim::contiguous_expert_order(shuffled.placement, shuffled.arch, shuffled.path);
  CHECK(permuted_contiguous(order, 4) == shuffled.placement.ranks);
}

TEST_CASE("export permutation: refused for replicas, uneven ranks and routing groups it would break") {
  const auto replicated = sim::load_checked_placement(export_data("replicated_equal.yaml"));
  CHECK(contains(
      input_error([&] { sim::contiguous_expert_order(replicated.placement, replicated.arch, replicated.path); }),
      "--format sglang"));
  const auto uneven =
      sim::load_checked_placement((testing::test_data_dir() / "placements/good_replicated.yaml").string());
  sim::Placement one_copy = uneven.placement;
  one_copy.ranks[0][0] = {0};  // layer 1: rank 0 holds 0,1,2 and rank 1 holds 3,4
  CHECK(contains(input_error([&] { sim::contiguous_expert_order(one_copy, uneven.arch, "u.yaml"); }),
                 "u.yaml: layer 1: rank 0 holds 3 experts, the contiguous layout 2"));

  // Group-limited routing (2 groups of 4): swapping whole groups keeps the router's choice...
  const auto swapped = sim::load_checked_placement(export_data("groups_swapped.yaml"));
  const auto order = sim::contiguous_expert_order(swapped.placement, swapped.arch, swapped.path);
  CHECK(permuted_contiguous(order, 4) == swapped.placement.ranks);
  CHECK(routing_unchanged(order[0], 2, 2, 1, 200));
  // ...while round-robin mixes the groups: routing would change, so it is refused.
  const auto rr = sim::load_checked_placement(export_data("round_robin_grouped.yaml"));
  CHECK(contains(input_error([&] { sim::contiguous_expert_order(rr.placement, rr.arch, rr.path); }),
                 "mixes experts of groups 0 and 1"));
  CHECK_FALSE(routing_unchanged({0, 4, 1, 5, 2, 6, 3, 7}, 2, 2, 1, 200));
}

TEST_CASE("export: unknown formats list the valid ones") {
  CHECK(sim::parse_export_format("permutation") == sim::ExportFormat::kPermutation);
  try {
    sim::parse_export_format("sglan");
    FAIL("expected a UsageError");
  } catch (const common::UsageError& e) {
    CHECK(contains(e.what(), "did you mean"));
    CHECK(contains(e.what(), "sglang, vllm, vllm-ascend, megatron, permutation"));
  }
}
