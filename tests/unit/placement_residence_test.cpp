// The placement side of residence dispatch (docs/placement.md, "Residence dispatch"): the owner pair
// counts, the owner rule's ties, the exflow policy against brute force and contiguous, moetuner on the
// owner pairs, and held-out evaluation counting sends from the rank a token lives on.
#include <algorithm>
#include <filesystem>
#include <numeric>

#include "common/error.hpp"
#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "sim/placement/evaluate.hpp"
#include "sim/placement/exflow.hpp"
#include "sim/placement/placement.hpp"
#include "sim/placement/policy.hpp"
#include "sim/placement/routing_counts.hpp"
#include "sim/placement/routing_rule.hpp"
#include "sim/placement/traffic.hpp"
#include "tests/support/test_support.hpp"
#include "traces/memory_trace.hpp"

using namespace moesim;

namespace {

std::string shipped_trace() {
  return (testing::source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string();
}

sim::RoutingCounts counts_of(const std::string& path) {
  auto reader = traces::open_trace(path);
  return sim::count_routing(*reader, "");
}

// Mixtral's widths with `experts` experts in MoE layers {0, 1}: a tiny architecture for hand cases.
models::Architecture tiny_arch(int experts, int top_k) {
  models::Architecture arch = models::load_architecture("mixtral-8x7b");
  arch.moe_layers = {0, 1};
  arch.num_experts = experts;
  arch.top_k = top_k;
  return arch;
}

// A placement with one copy per expert: rank[l][e].
sim::Placement single_copy(const std::vector<std::vector<int>>& rank, int ep, int tp) {
  sim::Placement p;
  p.architecture = "tiny";
  p.cluster = "tiny";
  p.ep = ep;
  p.tp = tp;
  p.policy = "hand";
  for (std::size_t l = 0; l < rank.size(); ++l) {
    p.layers.push_back(static_cast<int>(l));
    p.ranks.emplace_back();
    for (int r : rank[l]) p.ranks.back().push_back({r});
  }
  return p;
}

int count_on(const sim::Placement& p, std::size_t l, int rank) {
  return static_cast<int>(p.experts_on(l, rank).size());
}

}  // namespace

TEST_CASE("residence: next_owner pairs the top-1 expert with the next layer's top-k, by hand") {
  traces::MemoryTrace t;
  t.meta.shape = {"test-moe", {1, 2}, 4, 2};
  // token 0: layer 1 {0, 1}, layer 2 {2, 3}; token 1: {2, 0}, {2, 0} (top-1 first)
  t.tokens.sequence = {0, 0};
  t.tokens.position = {0, 1};
  t.tokens.experts = {0, 1, 2, 3, 2, 0, 2, 0};
  auto reader = traces::read_memory_trace(t);
  const sim::RoutingCounts c = sim::count_routing(*reader, "");
  REQUIRE(c.next_owner.size() == 1);
  std::vector<double> owner(16, 0.0);
  for (auto [a, b] : std::vector<std::pair<int, int>>{{0, 2}, {0, 3}, {2, 2}, {2, 0}})
    owner[static_cast<std::size_t>(a * 4 + b)] += 1;
  CHECK(c.next_owner[0] == owner);
  // next keeps all k x k pairs: expert 1 (token 0's second) appears there, never as an owner.
  CHECK(c.next[0][1 * 4 + 2] == 1.0);
  CHECK(std::accumulate(c.next[0].begin(), c.next[0].end(), 0.0) == 8.0);

  const sim::RoutingCounts swapped = sim::with_owner_pairs(c);
  CHECK(swapped.next == c.next_owner);
  CHECK(swapped.load == c.load);
  // Mixed like next: two copies of one trace, weights 1 and 3, give the same counts back.
  const sim::RoutingCounts mixed = sim::mix_routing({c, c}, {1.0, 3.0});
  REQUIRE(mixed.next_owner.size() == 1);
  for (std::size_t i = 0; i < 16; ++i) CHECK(mixed.next_owner[0][i] == doctest::Approx(owner[i]));
  // Counts without owner pairs (built by hand) cannot serve residence dispatch.
  sim::RoutingCounts bare = c;
  bare.next_owner.clear();
  CHECK_THROWS_AS(sim::with_owner_pairs(bare), common::InputError);
  CHECK(sim::mix_routing({bare, c}).next_owner.empty());
}

TEST_CASE("residence: owner_rank takes the rank running the most experts, ties to the highest-ranked expert") {
  CHECK(sim::owner_rank(std::vector<int>{4}) == 4);
  CHECK(sim::owner_rank(std::vector<int>{0, 1}) == 0);
  CHECK(sim::owner_rank(std::vector<int>{1, 0}) == 1);
  CHECK(sim::owner_rank(std::vector<int>{2, 1, 1}) == 1);        // two experts beat the top-1's one
  CHECK(sim::owner_rank(std::vector<int>{3, 5, 3, 5}) == 3);     // 2-2: the top-1's rank
  CHECK(sim::owner_rank(std::vector<int>{5, 3, 3, 5}) == 5);     // 2-2: the top-1's rank
  CHECK(sim::owner_rank(std::vector<int>{7, 2, 6, 6, 2}) == 2);  // 2-2 among 2 and 6: 2 ranks higher
}

TEST_CASE("exflow: a hand case whose optimum is known puts both high-affinity pairs together") {
  const models::Architecture arch = tiny_arch(4, 1);
  const models::Cluster cluster = models::load_cluster("h200-2x8-800g");
  sim::RoutingCounts routing;
  routing.layers = {0, 1};
  routing.num_experts = 4;
  routing.top_k = 1;
  routing.tokens = 212;
  routing.load = {{100, 1, 1, 100}, {1, 100, 100, 1}};
  // 0 -> 2 and 3 -> 1 are the affinities, 1 -> 0 and 2 -> 3 a token each: the optimum puts 0 and 1 of
  // layer 0 with 2 and 0 of layer 1, and 2 and 3 with 3 and 1, no token crossing (contiguous: 200 cross).
  std::vector<double> pairs(16, 0.0);
  pairs[0 * 4 + 2] = 100;
  pairs[3 * 4 + 1] = 100;
  pairs[1 * 4 + 0] = 1;
  pairs[2 * 4 + 3] = 1;
  routing.next = {pairs};
  routing.next_owner = {pairs};
  const auto registry = sim::default_placement_registry();
  // Two ranks on different nodes (tp 8): every move between them crosses the NICs.
  const sim::PlacementInput input{arch, cluster, 2, 8, &routing, {}};
  const sim::Placement p = registry.create("exflow")->place(input);
  sim::validate_placement(p, arch, "exflow");
  for (std::size_t l = 0; l < 2; ++l)
    for (int r = 0; r < 2; ++r) CHECK(count_on(p, l, r) == 2);
  CHECK(p.ranks[0][0] == p.ranks[1][2]);
  CHECK(p.ranks[0][3] == p.ranks[1][1]);

  // The optimum over all 6 x 6 balanced placements, by enumeration.
  double best = 1e300;
  const std::vector<std::vector<int>> halves = {{0, 0, 1, 1}, {0, 1, 0, 1}, {0, 1, 1, 0},
                                                {1, 1, 0, 0}, {1, 0, 1, 0}, {1, 0, 0, 1}};
  for (const auto& a : halves)
    for (const auto& b : halves)
      best = std::min(best, sim::exflow_objective(single_copy({a, b}, 2, 8), routing, arch, cluster, false));
  const double got = sim::exflow_objective(p, routing, arch, cluster, false);
  CHECK(got == doctest::Approx(best));
  CHECK(p.report["objective"].get<double>() == doctest::Approx(got));
  CHECK(got == doctest::Approx(0.0));
  const std::vector<double> cost = sim::rank_token_cost(arch, cluster, 2, 8);
  CHECK(p.report["contiguous_objective"].get<double>() == doctest::Approx(200 * cost[1]));
  CHECK(p.report["cost_per_token_s"]["inter_node"].get<double>() == doctest::Approx(cost[1]));

  // E not divisible by EP.
  const models::Architecture six = tiny_arch(6, 1);
  sim::RoutingCounts r6 = routing;
  r6.num_experts = 6;
  r6.load = {std::vector<double>(6, 1.0), std::vector<double>(6, 1.0)};
  r6.next = {std::vector<double>(36, 1.0)};
  r6.next_owner = r6.next;
  const models::Cluster one_node = models::load_cluster("h100-sxm-4gpu");
  CHECK_THROWS_AS(registry.create("exflow")->place({six, one_node, 4, 1, &r6, {}}), common::InputError);
}

TEST_CASE("exflow: lowers the affinity objective against contiguous on the shipped DeepSeek-V2-Lite trace") {
  const models::Architecture arch = models::load_architecture("deepseek-v2-lite");
  const models::Cluster cluster = models::load_cluster("h200-2x8-800g");
  const sim::RoutingCounts routing = counts_of(shipped_trace());
  const auto registry = sim::default_placement_registry();
  for (const bool residence : {false, true}) {
    CAPTURE(residence);
    sim::PlacementInput input{arch, cluster, 16, 1, &routing, {}};
    input.options.residence = residence;
    const sim::Placement ex = registry.create("exflow")->place(input);
    const sim::Placement contiguous = registry.create("contiguous")->place(input);
    sim::validate_placement(ex, arch, "exflow");
    for (std::size_t l = 0; l < ex.layers.size(); ++l)
      for (int r = 0; r < 16; ++r) CHECK(count_on(ex, l, r) == 4);
    const double ex_obj = sim::exflow_objective(ex, routing, arch, cluster, residence);
    const double cont_obj = sim::exflow_objective(contiguous, routing, arch, cluster, residence);
    CHECK(ex_obj < 0.9 * cont_obj);
    CHECK(ex.report["objective"].get<double>() == doctest::Approx(ex_obj));
    CHECK(ex.report["contiguous_objective"].get<double>() == doctest::Approx(cont_obj));
    CHECK(ex.report["status"] == "converged");
    // The sweeps also run from the contiguous layout: never worse than it, whatever the forward pass found.
    CHECK(ex.report["objective"].get<double>() <= ex.report["contiguous_objective"].get<double>());
    CHECK((ex.report["start"] == "contiguous" || ex.report["start"] == "forward pass"));
    CHECK(ex.report["cross_layer_pairs"] == (residence ? "next_owner (residence dispatch)" : "next"));
    // Deterministic.
    CHECK(registry.create("exflow")->place(input).ranks == ex.ranks);
  }
}

TEST_CASE("residence: moetuner's stage 2 weighs the owner pairs") {
  const models::Architecture arch = models::load_architecture("deepseek-v2-lite");
  const models::Cluster cluster = models::load_cluster("h200-2x8-800g");
  const sim::RoutingCounts routing = counts_of(shipped_trace());
  sim::PlacementInput input{arch, cluster, 16, 1, &routing, {}};
  input.options.residence = true;
  const sim::Placement p = sim::default_placement_registry().create("moetuner")->place(input);
  CHECK(p.report["cross_layer_pairs"] == "next_owner (residence dispatch)");
  const double owner = sim::placement_traffic_objective(p, sim::with_owner_pairs(routing), arch, cluster);
  const double all_pairs = sim::placement_traffic_objective(p, routing, arch, cluster);
  CHECK(p.report["stage2"]["objective"].get<double>() == doctest::Approx(owner));
  CHECK(owner != doctest::Approx(all_pairs));
}

TEST_CASE("residence: evaluate counts dispatch from the residence rank and combine to the owner, by hand") {
  testing::TempDir dir;
  // Two ranks, one per node (tp 8 on two nodes of eight); experts 0, 1 on rank 0 and 2, 3 on rank 1 in
  // both layers. Token A (sequence 0, home rank 0): {0, 1} then {1, 0}, it stays on rank 0: no send.
  // Token B (sequence 1, home rank 1): {0, 2} then {3, 2}. Layer 0: dispatched to rank 0 (1 send), the
  // owner is rank 0 (a 1-1 tie, expert 0 ranks first), rank 1 combines to it (1 send). Layer 1: from
  // rank 0 to rank 1 (1 send), owner rank 1, nothing to combine.
  traces::MemoryTrace t;
  t.meta.shape = {"test-moe", {0, 1}, 4, 2};
  t.tokens.sequence = {0, 1};
  t.tokens.position = {0, 0};
  t.tokens.experts = {0, 1, 1, 0, 0, 2, 3, 2};
  const std::string trace = (dir / "two.mtr").string();
  traces::save_trace(t, trace, traces::Encoding::kBinary, false);
  traces::MemoryTrace only_a = t;
  only_a.tokens.sequence = {0};
  only_a.tokens.position = {0};
  only_a.tokens.experts.resize(4);
  const std::string trace_a = (dir / "a.mtr").string();
  traces::save_trace(only_a, trace_a, traces::Encoding::kBinary, false);

  sim::CheckedPlacement c;
  c.path = (dir / "hand.yaml").string();
  c.arch = tiny_arch(4, 2);
  c.cluster = models::load_cluster("h200-2x8-800g");
  c.placement = single_copy({{0, 0, 1, 1}, {0, 0, 1, 1}}, 2, 8);
  const double token_bytes = 4096.0 * 2;  // Mixtral's hidden size in bf16

  const sim::PlacementEvaluation r = sim::evaluate_placement(c, trace, true);
  CHECK(r.residence);
  CHECK(r.sends == 3.0);
  CHECK(r.sends_off_node == 3.0);
  CHECK(r.bytes_off_node == doctest::Approx(3 * token_bytes));
  CHECK(r.pair_bytes[1][0] == doctest::Approx(2 * token_bytes));  // B's layer-0 dispatch and combine
  CHECK(r.pair_bytes[0][1] == doctest::Approx(token_bytes));      // B's layer-1 dispatch
  CHECK(r.transfers == 6.0);                                      // 5 dispatch destinations and 1 combine
  CHECK(r.share_off_gpu == doctest::Approx(3.0 / 6.0));
  CHECK(r.layer_max == std::vector<double>{3, 2});
  CHECK(r.to_json()["dispatch"] == "residence");
  CHECK(r.to_json()["bytes_off_node"].get<double>() == doctest::Approx(3 * token_bytes));
  CHECK(sim::evaluation_table(r).find("residence dispatch") != std::string::npos);
  CHECK(sim::evaluate_placement(c, trace_a, true).sends == 0.0);

  // Flat: every layer from the home rank; B's layer 1 is local to its home, so 1 dispatch leaves.
  const sim::PlacementEvaluation f = sim::evaluate_placement(c, trace);
  CHECK(!f.residence);
  CHECK(f.transfers == 5.0);
  CHECK(f.share_off_gpu == doctest::Approx(1.0 / 5.0));
  CHECK(f.share_off_node == doctest::Approx(1.0 / 5.0));
  CHECK(f.pair_bytes[1][0] == doctest::Approx(token_bytes));
  CHECK(f.pair_bytes[0][1] == 0.0);
  CHECK(f.sends == 0.0);
  const auto j = f.to_json();
  CHECK(j["dispatch"] == "flat");
  CHECK(!j.contains("sends"));
  CHECK(sim::comparison_table({f}).find("dispatch: flat") != std::string::npos);
  CHECK(sim::comparison_table({r}).find("dispatch: residence") != std::string::npos);
}
