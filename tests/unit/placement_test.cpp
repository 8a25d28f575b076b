#include "sim/placement/placement.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "sim/placement/policy.hpp"
#include "sim/placement/routing_counts.hpp"
#include "tests/support/test_support.hpp"
#include "traces/memory_trace.hpp"

using moesim::testing::error_of;

using moesim::common::InputError;
using moesim::common::UsageError;
using moesim::models::Architecture;
using moesim::models::Cluster;
using moesim::sim::count_routing;
using moesim::sim::default_placement_registry;
using moesim::sim::load_placement;
using moesim::sim::Placement;
using moesim::sim::PlacementInput;
using moesim::sim::PlacementRegistry;
using moesim::sim::RoutingCounts;
using moesim::sim::save_placement;
using moesim::sim::validate_placement;

namespace fs = std::filesystem;

namespace {

Architecture moe(int experts, std::vector<int> layers) {
  Architecture a;
  a.name = "test-moe";
  a.num_layers = layers.back() + 1;
  a.moe_layers = std::move(layers);
  a.num_experts = experts;
  a.top_k = 2;
  return a;
}

Cluster node_of(int gpus) {
  Cluster c;
  c.name = "test-node";
  c.num_nodes = 1;
  c.gpus_per_node = gpus;
  return c;
}

Placement place(const std::string& policy, const Architecture& arch, const Cluster& cluster, int ep, int tp = 1) {
  const PlacementRegistry registry = default_placement_registry();
  PlacementInput input{arch, cluster, ep, tp, nullptr, {}};
  return registry.create(policy)->place(input);
}

// Per rank, the experts it holds in layer index l.
std::vector<std::vector<int>> by_rank(const Placement& p, std::size_t l) {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < p.ep; ++r) out.push_back(p.experts_on(l, r));
  return out;
}


fs::path data(const std::string& name) { return moesim::testing::test_data_dir() / "placements" / (name + ".yaml"); }

}  // namespace

TEST_CASE("placement: contiguous and round_robin for E=64, EP=8") {
  const Architecture arch = moe(64, {1, 2, 3});
  const Cluster cluster = node_of(8);
  const Placement c = place("contiguous", arch, cluster, 8);
  const Placement r = place("round_robin", arch, cluster, 8);
  REQUIRE(c.layers == arch.moe_layers);
  REQUIRE(c.ranks.size() == 3);
  CHECK(c.policy == "contiguous");
  CHECK(r.policy == "round_robin");
  CHECK(c.architecture == "test-moe");
  CHECK(c.cluster == "test-node");
  CHECK(c.trace_sha256.empty());
  for (std::size_t l = 0; l < 3; ++l) {
    REQUIRE(c.ranks[l].size() == 64);
    for (int e = 0; e < 64; ++e) {
      CHECK(c.ranks[l][static_cast<std::size_t>(e)] == std::vector<int>{e / 8});
      CHECK(r.ranks[l][static_cast<std::size_t>(e)] == std::vector<int>{e % 8});
    }
    for (int rank = 0; rank < 8; ++rank) {
      std::vector<int> block(8);
      std::iota(block.begin(), block.end(), 8 * rank);
      CHECK(c.experts_on(l, rank) == block);
      const std::vector<int> strided{rank, rank + 8, rank + 16, rank + 24, rank + 32, rank + 40, rank + 48, rank + 56};
      CHECK(r.experts_on(l, rank) == strided);
    }
  }
  CHECK_NOTHROW(validate_placement(c, arch, "c"));
  CHECK_NOTHROW(validate_placement(r, arch, "r"));
}

TEST_CASE("placement: E=8, EP=3: the first E % EP ranks of contiguous hold one expert more") {
  const Architecture arch = moe(8, {0, 1});
  const Cluster cluster = node_of(6);  // 3 EP ranks of one GPU: two data-parallel copies
  const Placement c = place("contiguous", arch, cluster, 3);
  const Placement r = place("round_robin", arch, cluster, 3);
  for (std::size_t l = 0; l < 2; ++l) {
    CHECK(by_rank(c, l) == std::vector<std::vector<int>>{{0, 1, 2}, {3, 4, 5}, {6, 7}});
    CHECK(by_rank(r, l) == std::vector<std::vector<int>>{{0, 3, 6}, {1, 4, 7}, {2, 5}});
  }
  // More ranks than experts: contiguous leaves the last ranks empty, every expert still placed once.
  const Placement wide = place("contiguous", moe(2, {0}), node_of(4), 4);
  CHECK(by_rank(wide, 0) == std::vector<std::vector<int>>{{0}, {1}, {}, {}});
}

TEST_CASE("placement: policies check their input") {
  Architecture dense = moe(8, {0});
  dense.moe_layers.clear();
  CHECK(error_of([&] { place("contiguous", dense, node_of(8), 8); }).find("dense") != std::string::npos);
  // ep x tp must divide the GPUs; tp must divide a node.
  CHECK(error_of([&] { place("contiguous", moe(8, {0}), node_of(8), 3); }).find("to divide the 8 GPUs") !=
        std::string::npos);
  CHECK(error_of([&] { place("round_robin", moe(8, {0}), node_of(8), 8, 2); }).find("16 GPUs") != std::string::npos);
  CHECK(error_of([&] { place("round_robin", moe(8, {0}), node_of(6), 2, 3); }).find("power of two") !=
        std::string::npos);
  CHECK_NOTHROW(place("round_robin", moe(8, {0}), node_of(8), 4, 2));
}

TEST_CASE("placement: the registry creates by name and lists the valid names for an unknown one") {
  const PlacementRegistry registry = default_placement_registry();
  const std::vector<std::string> names = registry.names();
  REQUIRE(names.size() >= 2);
  CHECK(names[0] == "contiguous");
  CHECK(names[1] == "round_robin");
  for (const std::string& name : names) {
    CAPTURE(name);
    CHECK(registry.create(name)->name() == name);
    CHECK_FALSE(registry.summary(name).empty());
  }
  CHECK_FALSE(registry.create("contiguous")->needs_routing());
  CHECK(registry.summary("round_robin").find("e % EP") != std::string::npos);
  const std::string e = error_of([&] { registry.create("round-robin"); });
  CHECK(e.find("unknown placement policy \"round-robin\"") != std::string::npos);
  CHECK(e.find("did you mean \"round_robin\"") != std::string::npos);
  CHECK(e.find("valid names: " + moesim::common::join(names, ", ")) != std::string::npos);
  CHECK_THROWS_AS(registry.summary("no-such-policy"), InputError);

  // Later policies join through the same interface; a name is registered once.
  PlacementRegistry extended = default_placement_registry();
  extended.add("first", "every expert on rank 0", [] {
    struct First final : moesim::sim::PlacementPolicy {
      std::string name() const override { return "first"; }
      bool needs_routing() const override { return false; }
      Placement place(const PlacementInput& in) const override {
        Placement p = default_placement_registry().create("contiguous")->place(in);
        for (auto& layer : p.ranks)
          for (auto& ranks : layer) ranks = {0};
        p.policy = name();
        return p;
      }
    };
    return std::make_unique<First>();
  });
  CHECK(extended.names().size() == names.size() + 1);
  CHECK(extended.create("first")->place({moe(4, {0}), node_of(2), 2, 1, nullptr, {}}).experts_on(0, 0).size() == 4);
  CHECK_THROWS_AS(extended.add("contiguous", "again", [] { return default_placement_registry().create("contiguous"); }),
                  std::logic_error);
}

TEST_CASE("placement: validate_placement catches every structural mistake") {
  const Architecture arch = moe(4, {1, 2});
  const Placement good = place("round_robin", arch, node_of(2), 2);
  CHECK_NOTHROW(validate_placement(good, arch, "p.yaml"));

  Placement missing = good;
  missing.ranks[1][3].clear();
  CHECK(error_of([&] { validate_placement(missing, arch, "p.yaml"); }) ==
        "p.yaml: layer 2, expert 3: expected the expert on at least one EP rank, got none");
  Placement out_of_range = good;
  out_of_range.ranks[0][1] = {2};
  CHECK(error_of([&] { validate_placement(out_of_range, arch, "p.yaml"); }).find("expected EP ranks 0..1") !=
        std::string::npos);
  Placement twice = good;
  twice.ranks[0][0] = {0, 0};
  CHECK(error_of([&] { validate_placement(twice, arch, "p.yaml"); }).find("rank 0 is listed twice") !=
        std::string::npos);
  Placement wrong_layers = good;
  wrong_layers.layers = {1, 3};
  CHECK(error_of([&] { validate_placement(wrong_layers, arch, "p.yaml"); }).find("expected the MoE layers") !=
        std::string::npos);
  CHECK(error_of([&] {
          validate_placement(good, moe(8, {1, 2}), "p.yaml");
        }).find("expected 8 experts") != std::string::npos);
}

TEST_CASE("placement: save -> load round-trips exactly") {
  moesim::testing::TempDir dir;
  const Architecture arch = moesim::models::load_architecture((data("models/tiny-moe")).string());
  const Cluster cluster = moesim::models::load_cluster("h100-sxm-4gpu");
  Placement p = place("contiguous", arch, cluster, 4);
  // Shipped configs are stored by name, others by absolute path.
  CHECK(p.cluster == "h100-sxm-4gpu");
  CHECK(fs::path(p.architecture).is_absolute());
  // Replicas, uneven ranks, a trace hash and a report survive too.
  p.ranks[0][0] = {0, 2};
  p.ranks[1][7] = {1, 2, 3};
  p.policy = "hand_made";
  p.trace_sha256 = std::string(64, 'a');
  p.report = {{"status", "optimal"}, {"gap", 0.0123456789012345}, {"nodes", 12}, {"bounds", {1.5, 2}}, {"note", "1"},
              {"ok", true}};

  const fs::path file = dir / "p.yaml";
  save_placement(p, file.string(), false);
  const Placement q = load_placement(file.string());
  CHECK(q.architecture == p.architecture);
  CHECK(q.cluster == p.cluster);
  CHECK(q.ep == p.ep);
  CHECK(q.tp == p.tp);
  CHECK(q.policy == p.policy);
  CHECK(q.trace_sha256 == p.trace_sha256);
  CHECK(q.layers == p.layers);
  CHECK(q.ranks == p.ranks);
  CHECK(q.report == p.report);
  CHECK(q.report["note"].is_string());
  CHECK(moesim::sim::placement_to_yaml(q) == moesim::testing::read_text(file));

  // An existing file is kept unless overwriting is asked for.
  CHECK(error_of([&] { save_placement(q, file.string(), false); }).find("--force") != std::string::npos);
  Placement r = q;
  r.policy = "changed";
  save_placement(r, file.string(), true);
  CHECK(load_placement(file.string()).policy == "changed");
}

TEST_CASE("placement: the shipped example files load") {
  const Placement c = load_placement(data("good_contiguous").string());
  const Architecture arch = moesim::models::load_architecture(data("models/tiny-moe").string());
  const Placement expected = place("contiguous", arch, moesim::models::load_cluster("h100-sxm-4gpu"), 4);
  CHECK(c.ranks == expected.ranks);
  CHECK(c.architecture ==
        (moesim::testing::test_data_dir() / "placements/models/tiny-moe.yaml").lexically_normal().string());

  const Placement r = load_placement(data("good_replicated").string());
  CHECK(r.ranks[0][0] == std::vector<int>{0, 2});
  CHECK(r.experts_on(0, 2) == std::vector<int>{0, 5});
  CHECK(r.experts_on(1, 1) == std::vector<int>{1, 2, 3});
  CHECK(r.experts_on(1, 3) == std::vector<int>{7});
  CHECK(r.report["max_load"] == 3);
  CHECK(r.report["imbalance"] == 1.5);
  CHECK(r.trace_sha256.size() == 64);
}

namespace {

struct BadCase {
  std::string file;
  std::string position;
  std::string fragment;
};

const std::vector<BadCase> kBadPlacements = {
    {"bad_placement_expert_missing", "18:7",
     "layers[1].ranks: expected every expert 0..7 on at least one rank, got "
     "expert 5 on none in layer 2"},
    {"bad_placement_rank_out_of_range", "27:10", "layers[2].ranks.4: expected EP ranks 0..3 (ep: 4), got rank 4"},
    {"bad_placement_duplicate_rank", "13:17",
     "layers[0].ranks.1[2]: expected each expert once per rank, got expert 3 "
     "twice on rank 1"},
    {"bad_placement_layer_missing", "10:3",
     "layers: expected an entry for every MoE layer of tiny-moe (1..3), got "
     "none for layer 3"},
    {"bad_placement_dense_layer", "10:12",
     "layers[0].layer: expected an MoE layer of tiny-moe (1..3), got layer 0, "
     "a dense layer"},
    {"bad_placement_layer_out_of_range", "28:12", "layers[3].layer: expected an integer between 0 and 3, got \"7\""},
    {"bad_placement_duplicate_layer", "22:12", "layers[2].layer: expected each layer once, got layer 2 again"},
    {"bad_placement_ep_gpus", "6:5",
     "ep: expected ep x tp (3 x 1 = 3 GPUs) to divide the 4 GPUs of cluster "
     "h100-sxm-4gpu"},
    {"bad_placement_ep_too_large", "6:5", "ep: expected ep x tp (4 x 2 = 8 GPUs) to divide the 4 GPUs"},
    {"bad_placement_tp", "7:5", "tp: expected tp to be a power of two dividing the 4 GPUs per node"},
    {"bad_placement_expert_out_of_range", "21:17",
     "layers[1].ranks.3[2]: expected an integer between 0 and 7, got "
     "\"8\""},
    {"bad_placement_rank_key", "25:14", "layers[2].ranks.rank1: expected an EP rank number as the key"},
    {"bad_placement_wrong_kind", "3:7", "kind: expected \"placement\""},
    {"bad_placement_unknown_key", "8:1", "polcy: unknown key (did you mean \"policy\"?)"},
    {"bad_placement_missing_key", "2:1", "policy: required key \"policy\" is missing"},
    {"bad_placement_schema_version", "2:17", "schema_version: expected schema version 1"},
    {"bad_placement_trace_sha", "9:15", "trace_sha256: expected a SHA-256 as 64 lower-case hex digits"},
    {"bad_placement_unknown_architecture", "4:15", "architecture: unknown architecture \"tiny-mo\""},
    {"bad_placement_dense_architecture", "4:15",
     "architecture: expected an MoE architecture, got llama2-13b, a dense "
     "model"},
    {"bad_placement_unknown_cluster", "5:10",
     "cluster: unknown cluster \"h100-sxm-4\" (did you mean "
     "\"h100-sxm-4gpu\"?)"},
    {"bad_placement_ranks_not_map", "23:12", "layers[2].ranks: expected a map of keys, got a list"},
};

}  // namespace

TEST_CASE("placement: each bad file is an InputError naming file:line:col") {
  for (const BadCase& c : kBadPlacements) {
    CAPTURE(c.file);
    const fs::path file = data(c.file);
    REQUIRE(fs::exists(file));
    const std::string e = error_of([&] { load_placement(file.string()); });
    CHECK_MESSAGE(e.rfind(file.string() + ":" + c.position + ": ", 0) == 0, e);
    CHECK_MESSAGE(e.find(c.fragment) != std::string::npos, e);
  }
  // Every bad file of the folder that the loader rejects is in the table; the others (bad for reasons
  // beyond the format, such as memory, checked by the solvers' tests) must load.
  std::set<std::string> listed;
  for (const BadCase& c : kBadPlacements) listed.insert(c.file);
  for (const auto& entry : fs::directory_iterator(moesim::testing::test_data_dir() / "placements")) {
    const std::string stem = entry.path().stem().string();
    if (!stem.starts_with("bad_") || listed.count(stem)) continue;
    CHECK_MESSAGE(error_of([&] { load_placement(entry.path().string()); }).empty(), entry.path());
  }
}

namespace {

// A random trace over layers {1, 2, 4}, 6 experts, top-3, in two sequences.
moesim::traces::MemoryTrace random_trace(std::size_t tokens) {
  moesim::traces::MemoryTrace t;
  t.meta.shape = {"test-moe", {1, 2, 4}, 6, 3};
  std::mt19937 rng(7);
  for (std::size_t i = 0; i < tokens; ++i) {
    t.tokens.sequence.push_back(i < tokens / 2 ? 0u : 1u);
    t.tokens.position.push_back(static_cast<std::uint32_t>(i < tokens / 2 ? i : i - tokens / 2));
    for (int l = 0; l < 3; ++l) {
      std::vector<std::uint16_t> ids{0, 1, 2, 3, 4, 5};
      std::shuffle(ids.begin(), ids.end(), rng);
      t.tokens.experts.insert(t.tokens.experts.end(), ids.begin(), ids.begin() + 3);
    }
  }
  return t;
}

}  // namespace

TEST_CASE("placement: count_routing on a hand-checked trace") {
  moesim::traces::MemoryTrace t;
  t.meta.shape = {"test-moe", {1, 2}, 4, 2};
  // token 0: layer 1 {0,1}, layer 2 {2,3}; token 1: {0,2}, {2,0}
  t.tokens.sequence = {0, 0};
  t.tokens.position = {0, 1};
  t.tokens.experts = {0, 1, 2, 3, 0, 2, 2, 0};
  auto reader = moesim::traces::read_memory_trace(t);
  const RoutingCounts c = count_routing(*reader, "abc");
  CHECK(c.layers == std::vector<int>{1, 2});
  CHECK(c.num_experts == 4);
  CHECK(c.top_k == 2);
  CHECK(c.tokens == 2);
  CHECK(c.trace_sha256 == "abc");
  CHECK(c.load[0] == std::vector<double>{2, 1, 1, 0});
  CHECK(c.load[1] == std::vector<double>{1, 0, 2, 1});
  REQUIRE(c.next.size() == 1);
  std::vector<double> pairs(16, 0.0);
  for (auto [a, b] : std::vector<std::pair<int, int>>{{0, 2}, {0, 3}, {1, 2}, {1, 3}, {0, 2}, {0, 0}, {2, 2}, {2, 0}})
    pairs[static_cast<std::size_t>(a * 4 + b)] += 1;
  CHECK(c.next[0] == pairs);
}

TEST_CASE("placement: count_routing streams blocks and covers the whole trace") {
  const moesim::traces::MemoryTrace t = random_trace(10001);  // more than two reader blocks of 4096
  auto reader = moesim::traces::read_memory_trace(t);
  moesim::traces::TokenBlock some;
  reader->next(some, 100);  // a partly read reader is rewound first
  const RoutingCounts c = count_routing(*reader, "");
  CHECK(c.tokens == 10001);
  std::vector<std::vector<double>> load(3, std::vector<double>(6, 0.0));
  std::vector<std::vector<double>> next(2, std::vector<double>(36, 0.0));
  for (std::size_t i = 0; i < 10001; ++i) {
    const std::uint16_t* tok = t.tokens.experts.data() + i * 9;
    for (std::size_t l = 0; l < 3; ++l)
      for (std::size_t k = 0; k < 3; ++k) {
        load[l][tok[l * 3 + k]] += 1;
        if (l < 2)
          for (std::size_t j = 0; j < 3; ++j) next[l][tok[l * 3 + k] * 6u + tok[(l + 1) * 3 + j]] += 1;
      }
  }
  CHECK(c.load == load);
  CHECK(c.next == next);
  for (std::size_t l = 0; l < 3; ++l) CHECK(std::accumulate(c.load[l].begin(), c.load[l].end(), 0.0) == 10001.0 * 3);
  for (std::size_t l = 0; l < 2; ++l) CHECK(std::accumulate(c.next[l].begin(), c.next[l].end(), 0.0) == 10001.0 * 9);
}

namespace {

// Two layers, two experts, top-1: load [l][e], next [e1 * 2 + e2].
RoutingCounts tiny_counts(std::uint64_t tokens, std::vector<std::vector<double>> load, std::vector<double> next) {
  RoutingCounts c;
  c.layers = {0, 1};
  c.num_experts = 2;
  c.top_k = 1;
  c.tokens = tokens;
  c.trace_sha256 = std::string(64, 'a');
  c.load = std::move(load);
  c.next = {std::move(next)};
  return c;
}

}  // namespace

TEST_CASE("placement: mix_routing on a hand-computed example") {
  // A: 2 tokens, all on expert 0 in layer 0, split in layer 1. B: 4 tokens, all on expert 1, then split.
  const RoutingCounts a = tiny_counts(2, {{2, 0}, {1, 1}}, {1, 1, 0, 0});
  const RoutingCounts b = tiny_counts(4, {{0, 4}, {2, 2}}, {0, 0, 2, 2});
  // Weights 1 : 3 -> 0.25, 0.75. Per token A = {{1, 0}, {.5, .5}}, B = {{0, 1}, {.5, .5}}; the mean token
  // count is 3, so layer 0 is 3 x (0.25, 0.75) = (0.75, 2.25); next 3 x (.125, .125, .375, .375).
  const RoutingCounts m = moesim::sim::mix_routing({a, b}, {1.0, 3.0});
  CHECK(m.tokens == 3);
  CHECK(m.trace_sha256.empty());
  CHECK(m.layers == a.layers);
  CHECK(m.num_experts == 2);
  CHECK(m.top_k == 1);
  REQUIRE(m.load.size() == 2);
  CHECK(m.load[0][0] == doctest::Approx(0.75));
  CHECK(m.load[0][1] == doctest::Approx(2.25));
  CHECK(m.load[1][0] == doctest::Approx(1.5));
  CHECK(m.load[1][1] == doctest::Approx(1.5));
  REQUIRE(m.next.size() == 1);
  const std::vector<double> next = {0.375, 0.375, 1.125, 1.125};
  for (std::size_t i = 0; i < 4; ++i) CHECK(m.next[0][i] == doctest::Approx(next[i]));

  // Equal weights: the long trace does not outweigh the short one (per token 0.5 each, x 3 tokens).
  const RoutingCounts eq = moesim::sim::mix_routing({a, b});
  CHECK(eq.load[0][0] == doctest::Approx(1.5));
  CHECK(eq.load[0][1] == doctest::Approx(1.5));
  // Scaling the weights changes nothing; one trace comes back as it is.
  const RoutingCounts scaled = moesim::sim::mix_routing({a, b}, {10.0, 30.0});
  CHECK(scaled.load[0][1] == doctest::Approx(2.25));
  const RoutingCounts one = moesim::sim::mix_routing({b}, {7.0});
  CHECK(one.load == b.load);
  CHECK(one.next == b.next);
  CHECK(one.tokens == 4);
  CHECK(one.trace_sha256 == b.trace_sha256);
}

TEST_CASE("placement: mix_routing refuses what it cannot combine") {
  const RoutingCounts a = tiny_counts(2, {{2, 0}, {1, 1}}, {1, 1, 0, 0});
  RoutingCounts other = a;
  other.num_experts = 3;
  CHECK(error_of([&] { moesim::sim::mix_routing({a, other}); }).find("trace 1") != std::string::npos);
  RoutingCounts empty = a;
  empty.tokens = 0;
  CHECK(error_of([&] { moesim::sim::mix_routing({a, empty}); }).find("no tokens") != std::string::npos);
  CHECK_THROWS_AS(moesim::sim::mix_routing({a, a}, {1.0}), InputError);
  CHECK_THROWS_AS(moesim::sim::mix_routing({a, a}, {1.0, 0.0}), InputError);
  CHECK_THROWS_AS(moesim::sim::mix_routing({a, a}, {1.0, std::nan("")}), InputError);
  CHECK_THROWS_AS(moesim::sim::mix_routing({}, {}), InputError);
}
