// The placement solvers stage by stage: EPLB on DeepSeek's published example; MoETuner's stage 1
// against an exhaustive enumeration of stage 1, stage 2 against an exhaustive enumeration given the
// solver's own stage-1 clusters (optimal claims must match, otherwise bound <= optimum <= objective);
// greedy, random and the registry.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/error.hpp"
#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "sim/placement/eplb.hpp"
#include "sim/placement/greedy.hpp"
#include "sim/placement/moetuner_stage1.hpp"
#include "sim/placement/moetuner_stage2.hpp"
#include "sim/placement/placement.hpp"
#include "sim/placement/policy.hpp"
#include "sim/placement/traffic.hpp"
#include "tests/support/test_support.hpp"
#include "tests/unit/placement_test_routing.hpp"

using namespace moesim;

namespace {

// A small deterministic generator for test instances.
struct Lcg {
  std::uint64_t s;
  explicit Lcg(std::uint64_t seed) : s(seed * 2862933555777941757ULL + 3037000493ULL) {}
  std::uint64_t next() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return s >> 33;
  }
  double skewed(int range) {  // integer loads with a few hot experts
    const double u = static_cast<double>(next() % 1000) / 1000.0;
    return std::floor(1.0 + range * u * u * u);
  }
};

double enumerate_stage1(const std::vector<double>& load, int clusters, bool equal_sizes = false) {
  const std::size_t E = load.size();
  std::vector<int> c(E, 0);
  double best = std::numeric_limits<double>::infinity();
  std::size_t combos = 1;
  for (std::size_t i = 0; i < E; ++i) combos *= static_cast<std::size_t>(clusters);
  for (std::size_t code = 0; code < combos; ++code) {
    std::size_t x = code;
    std::vector<int> count(static_cast<std::size_t>(clusters), 0);
    for (std::size_t e = 0; e < E; ++e) {
      c[e] = static_cast<int>(x % static_cast<std::size_t>(clusters));
      x /= static_cast<std::size_t>(clusters);
      ++count[static_cast<std::size_t>(c[e])];
    }
    if (std::find(count.begin(), count.end(), 0) != count.end()) continue;
    if (equal_sizes && std::any_of(count.begin(), count.end(), [&](int n) {
          return n != static_cast<int>(E) / clusters && n != (static_cast<int>(E) + clusters - 1) / clusters;
        }))
      continue;
    best = std::min(best, sim::stage1_layer_objective(load, c, clusters));
  }
  return best;
}

// Every layout of every layer (G!^L), memory balance as the solver states it: the best objective
// among the layouts with the smallest balance violation (0 when exact balance is possible).
struct Enumerated {
  double best = std::numeric_limits<double>::infinity();
  int violation = std::numeric_limits<int>::max();
};
Enumerated enumerate_stage2(const sim::Stage2Problem& p, int lo, int hi) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = p.sizes.size();
  std::vector<std::vector<int>> perms;
  std::vector<int> perm(G);
  std::iota(perm.begin(), perm.end(), 0);
  do perms.push_back(perm);
  while (std::next_permutation(perm.begin(), perm.end()));
  Enumerated out;
  std::vector<std::size_t> idx(L, 0);
  std::vector<std::vector<int>> on(L);
  while (true) {
    for (std::size_t l = 0; l < L; ++l) on[l] = perms[idx[l]];
    std::vector<int> total(G, 0);
    for (std::size_t l = 0; l < L; ++l)
      for (std::size_t g = 0; g < G; ++g) total[g] += p.sizes[l][static_cast<std::size_t>(on[l][g])];
    int v = 0;
    for (int t : total) v += std::max(0, t - hi) + std::max(0, lo - t);
    const double obj = sim::stage2_objective(p, on);
    if (v < out.violation || (v == out.violation && obj < out.best)) out.violation = v, out.best = obj;
    std::size_t l = 0;
    while (l < L && ++idx[l] == perms.size()) idx[l++] = 0;
    if (l == L) break;
  }
  return out;
}

sim::Stage2Problem random_stage2(Lcg& rng, const std::vector<std::vector<int>>& clusters, int ranks,
                                 const std::vector<int>& node) {
  sim::Stage2Problem p;
  p.ranks = ranks;
  p.node = node;
  const auto G = static_cast<std::size_t>(ranks);
  p.cost.assign(G * G, 0.0);
  for (std::size_t a = 0; a < G; ++a)
    for (std::size_t b = 0; b < G; ++b)
      if (a != b) p.cost[a * G + b] = node[a] == node[b] ? 1.0 : 9.0;
  for (const auto& layer : clusters) {
    std::vector<int> size(G, 0);
    for (int c : layer) ++size[static_cast<std::size_t>(c)];
    p.sizes.push_back(size);
  }
  for (std::size_t l = 0; l + 1 < clusters.size(); ++l) {
    std::vector<double> t(G * G);
    for (auto& v : t) v = rng.skewed(100);
    p.traffic.push_back(t);
  }
  return p;
}

void check_stage2_against_enumeration(const sim::Stage2Problem& p) {
  const sim::Stage2Result r = sim::moetuner_stage2(p, sim::SolverLimits{});
  const Enumerated en = enumerate_stage2(p, r.memory_target_lo, r.memory_target_hi);
  CAPTURE(r.report.status);
  CAPTURE(r.report.objective);
  CAPTURE(r.report.bound);
  CAPTURE(en.best);
  CHECK(r.report.objective == doctest::Approx(sim::stage2_objective(p, r.cluster_on)));
  if (en.violation == 0) {
    // The solver's layout keeps every rank's experts in the target range when that is possible.
    CHECK(r.memory_min >= r.memory_target_lo);
    CHECK(r.memory_max <= r.memory_target_hi);
    CHECK(r.report.bound <= en.best * (1 + 1e-9));
    CHECK(r.report.objective >= en.best * (1 - 1e-9));
    if (r.report.status == "optimal") CHECK(r.report.objective == doctest::Approx(en.best));
  }
  CHECK(r.report.bound <= r.report.objective * (1 + 1e-12));
  for (std::size_t l = 0; l < r.cluster_on.size(); ++l) {
    std::vector<int> sorted = r.cluster_on[l];
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t g = 0; g < sorted.size(); ++g) CHECK(sorted[g] == static_cast<int>(g));
  }
}

}  // namespace

TEST_CASE("eplb: the published example gives the published physical-to-logical map") {
  const YAML::Node doc = YAML::LoadFile((testing::reference_dir() / "eplb/example.yaml").string());
  const auto weight = doc["weight"].as<std::vector<std::vector<double>>>();
  const auto expected = doc["phy2log"].as<std::vector<std::vector<int>>>();
  const sim::EplbMap map = sim::eplb_rebalance(weight, doc["num_replicas"].as<int>(), doc["num_groups"].as<int>(),
                                               doc["num_nodes"].as<int>(), doc["num_gpus"].as<int>());
  CHECK(map.hierarchical);
  REQUIRE(map.phy2log.size() == expected.size());
  for (std::size_t l = 0; l < expected.size(); ++l) CHECK(map.phy2log[l] == expected[l]);
  // Replica counts: 16 slots over 12 experts, every expert at least once.
  for (const auto& counts : map.replica_count) {
    CHECK(std::accumulate(counts.begin(), counts.end(), 0) == 16);
    CHECK(*std::min_element(counts.begin(), counts.end()) >= 1);
  }
}

TEST_CASE("eplb: global packing when nodes do not divide groups, and size errors") {
  const std::vector<std::vector<double>> w = {{10, 1, 1, 1, 5, 2}};
  const sim::EplbMap map = sim::eplb_rebalance(w, 8, 3, 2, 4);
  CHECK_FALSE(map.hierarchical);
  REQUIRE(map.phy2log[0].size() == 8);
  // The two redundant slots go to the experts with the highest load per replica: 0 (10 -> 5) and 0 or 4.
  CHECK(map.replica_count[0][0] >= 2);
  CHECK_THROWS_AS(sim::eplb_rebalance(w, 7, 1, 1, 4), common::InputError);
  CHECK_THROWS_AS(sim::eplb_rebalance(w, 8, 4, 1, 4), common::InputError);
}

TEST_CASE("lpt: every bin non-empty and the cap respected") {
  const std::vector<double> load = {100, 1, 1, 1, 1, 1, 1, 1};
  const auto bins = sim::lpt_partition(load, 4, 0);
  std::vector<int> count(4, 0);
  for (int b : bins) ++count[static_cast<std::size_t>(b)];
  for (int c : count) CHECK(c >= 1);
  const auto capped = sim::lpt_partition(load, 4, 2);
  std::fill(count.begin(), count.end(), 0);
  for (int b : capped) ++count[static_cast<std::size_t>(b)];
  for (int c : count) CHECK(c == 2);
}

TEST_CASE("moetuner stage 1 against exhaustive enumeration (6 experts, 3 clusters, 3 layers)") {
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    Lcg rng(seed);
    std::vector<std::vector<double>> load(3, std::vector<double>(6));
    for (auto& layer : load)
      for (auto& v : layer) v = rng.skewed(seed % 2 ? 60 : 400);
    const sim::Stage1Result r = sim::moetuner_stage1(load, 3, sim::SolverLimits{});
    double total = 0.0;
    for (std::size_t l = 0; l < load.size(); ++l) {
      const double best = enumerate_stage1(load[l], 3);
      total += best;
      CAPTURE(seed);
      CAPTURE(l);
      CHECK(r.layer_objective[l] == doctest::Approx(sim::stage1_layer_objective(load[l], r.clusters[l], 3)));
      CHECK(r.layer_bound[l] <= best + 1e-9);
      CHECK(r.layer_objective[l] >= best - 1e-9);
      if (r.layer_optimal[l]) CHECK(r.layer_objective[l] == doctest::Approx(best));
      std::vector<int> count(3, 0);
      for (int c : r.clusters[l]) ++count[static_cast<std::size_t>(c)];
      for (int c : count) CHECK(c >= 1);
    }
    CHECK(r.report.bound <= total + 1e-9);
    CHECK(r.report.objective >= total - 1e-9);
    if (r.report.status == "optimal") CHECK(r.report.objective == doctest::Approx(total));
  }
}

TEST_CASE("moetuner_equal stage 1 against exhaustive enumeration of equal-size clusterings") {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    Lcg rng(seed + 50);
    std::vector<std::vector<double>> load(3, std::vector<double>(6));
    for (auto& layer : load)
      for (auto& v : layer) v = rng.skewed(300);
    const sim::Stage1Result r = sim::moetuner_stage1(load, 3, sim::SolverLimits{}, true);
    for (std::size_t l = 0; l < load.size(); ++l) {
      CAPTURE(seed);
      const double best = enumerate_stage1(load[l], 3, true);
      std::vector<int> count(3, 0);
      for (int c : r.clusters[l]) ++count[static_cast<std::size_t>(c)];
      for (int c : count) CHECK(c == 2);
      CHECK(r.layer_bound[l] <= best + 1e-9);
      CHECK(r.layer_objective[l] >= best - 1e-9);
      if (r.layer_optimal[l]) CHECK(r.layer_objective[l] == doctest::Approx(best));
    }
  }
}

TEST_CASE("moetuner stage 1: a hot expert sits alone and the bound is tight") {
  const std::vector<std::vector<double>> load = {{500, 10, 20, 30, 40, 50, 60, 70}};
  const sim::Stage1Result r = sim::moetuner_stage1(load, 4, sim::SolverLimits{});
  const int hot = r.clusters[0][0];
  for (std::size_t e = 1; e < 8; ++e) CHECK(r.clusters[0][e] != hot);
  CHECK(r.report.status == "optimal");
  CHECK(r.report.objective == doctest::Approx(enumerate_stage1(load[0], 4)));
}

TEST_CASE("moetuner stage 2 against exhaustive enumeration given the solver's stage-1 clusters") {
  SUBCASE("6 experts, 3 ranks, 3 layers, one node") {
    for (std::uint64_t seed = 1; seed <= 8; ++seed) {
      CAPTURE(seed);
      Lcg rng(seed + 100);
      std::vector<std::vector<double>> load(3, std::vector<double>(6));
      for (auto& layer : load)
        for (auto& v : layer) v = rng.skewed(300);
      const sim::Stage1Result s1 = sim::moetuner_stage1(load, 3, sim::SolverLimits{});
      check_stage2_against_enumeration(random_stage2(rng, s1.clusters, 3, {0, 0, 0}));
    }
  }
  SUBCASE("8 experts, 4 ranks on 2 nodes, 3 layers") {
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      CAPTURE(seed);
      Lcg rng(seed + 200);
      std::vector<std::vector<double>> load(3, std::vector<double>(8));
      for (auto& layer : load)
        for (auto& v : layer) v = rng.skewed(300);
      const sim::Stage1Result s1 = sim::moetuner_stage1(load, 4, sim::SolverLimits{});
      check_stage2_against_enumeration(random_stage2(rng, s1.clusters, 4, {0, 0, 1, 1}));
    }
  }
}

TEST_CASE("moetuner stage 2: the pair bound is the exact pair optimum on one node") {
  // One layer pair, three ranks on one node: the optimum co-locates the largest disjoint entries.
  sim::Stage2Problem p;
  p.ranks = 3;
  p.node = {0, 0, 0};
  p.cost = {0, 1, 1, 1, 0, 1, 1, 1, 0};
  p.sizes = {{1, 1, 1}, {1, 1, 1}};
  p.traffic = {{50, 1, 2, 3, 40, 4, 5, 6, 30}};
  CHECK(sim::stage2_pair_bound(p, 0) == doctest::Approx(6.0));
  const sim::Stage2Result r = sim::moetuner_stage2(p, sim::SolverLimits{});
  CHECK(r.report.status == "optimal");
  CHECK(r.report.objective == doctest::Approx(6.0));
}

TEST_CASE("policies: registry names, greedy balances, random is seeded") {
  const sim::PlacementRegistry registry = sim::default_placement_registry();
  const auto names = registry.names();
  for (const char* n :
       {"contiguous", "round_robin", "random", "greedy", "eplb", "moetuner", "moetuner_equal", "moetuner_replicated",
        "exflow"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());
  CHECK_THROWS_AS(registry.create("moetunr"), common::InputError);

  const models::Architecture arch = models::load_architecture("mixtral-8x7b");
  const models::Cluster cluster = models::load_cluster("h100-sxm-4gpu");
  Lcg rng(7);
  const sim::RoutingCounts routing = moesim::testing::skewed_mixtral_routing(arch, rng, 500, 50);
  const sim::PlacementInput input{arch, cluster, 4, 1, &routing, {}};
  const sim::Placement greedy = registry.create("greedy")->place(input);
  const sim::Placement contiguous = registry.create("contiguous")->place(input);
  auto sum_max = [&](const sim::Placement& p) {
    double s = 0.0;
    for (std::size_t l = 0; l < p.layers.size(); ++l) {
      std::vector<double> per(4, 0.0);
      for (std::size_t e = 0; e < 8; ++e) per[static_cast<std::size_t>(p.ranks[l][e][0])] += routing.load[l][e];
      s += *std::max_element(per.begin(), per.end());
    }
    return s;
  };
  CHECK(sum_max(greedy) < sum_max(contiguous));
  for (std::size_t l = 0; l < greedy.layers.size(); ++l)
    for (int r = 0; r < 4; ++r) CHECK(greedy.experts_on(l, r).size() == 2);

  sim::PlacementInput seeded{arch, cluster, 4, 1, nullptr, {}};
  seeded.options.seed = 3;
  const sim::Placement a = registry.create("random")->place(seeded);
  const sim::Placement b = registry.create("random")->place(seeded);
  CHECK(a.ranks == b.ranks);
  seeded.options.seed = 4;
  CHECK(registry.create("random")->place(seeded).ranks != a.ranks);

  // moetuner: the reported stage-2 objective is the one recomputed from the placement.
  const sim::Placement m = registry.create("moetuner")->place(input);
  sim::validate_placement(m, arch, "moetuner");
  CHECK(m.report["stage2"]["objective"].get<double>() ==
        doctest::Approx(sim::placement_traffic_objective(m, routing, arch, cluster)).epsilon(1e-12));
  CHECK(m.report["stage1"]["bound"].get<double>() <= m.report["stage1"]["objective"].get<double>() + 1e-9);

  // eplb with replicas: 8 + 4 slots over 4 ranks, 3 per rank.
  sim::PlacementInput rep = input;
  rep.options.replicas = 4;
  const sim::Placement e = registry.create("eplb")->place(rep);
  std::size_t copies = 0;
  for (const auto& layer : e.ranks)
    for (const auto& holders : layer) copies += holders.size();
  CHECK(copies + e.report["collapsed_replicas"].get<std::size_t>() == 12 * e.layers.size());
  for (std::size_t l = 0; l < e.layers.size(); ++l)
    for (int r = 0; r < 4; ++r) CHECK(e.experts_on(l, r).size() <= 3);
  rep.options.replicas = 3;
  CHECK_THROWS_AS(registry.create("eplb")->place(rep), common::InputError);
}
