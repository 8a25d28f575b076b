// Placement files written by every built-in policy read back unchanged: save_placement then
// load_placement gives an equal Placement (every field, the solver's report JSON included), and
// placement_to_yaml of the loaded placement is the saved text byte for byte. Covers replicas (eplb,
// moetuner_replicated), moetuner's nested report with doubles, a TP group of two GPUs on two nodes
// and an architecture stored by absolute path.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "sim/placement/placement.hpp"
#include "sim/placement/policy.hpp"
#include "sim/placement/routing_counts.hpp"
#include "tests/support/test_support.hpp"
#include "tests/unit/placement_test_routing.hpp"

using namespace moesim;
namespace fs = std::filesystem;

namespace {

// Integer loads with a few hot experts, from a fixed seed.
struct Rng : testing::SkewedRng {
  explicit Rng(std::uint64_t seed) : SkewedRng(seed, 99) {}
};

struct Case {
  std::string policy;
  int replicas = 0;
};

sim::Placement solve(const Case& c, const models::Architecture& arch, const models::Cluster& cluster, int ep, int tp,
                     const sim::RoutingCounts& routing) {
  const sim::PlacementRegistry registry = sim::default_placement_registry();
  const auto policy = registry.create(c.policy);
  sim::PlacementInput input{arch, cluster, ep, tp, policy->needs_routing() ? &routing : nullptr, {}};
  input.options.replicas = c.replicas;
  input.options.seed = 7;
  return policy->place(input);
}

// Saves, loads back and compares every field and the text; returns the loaded placement.
sim::Placement round_trip(const sim::Placement& p, const fs::path& file) {
  sim::save_placement(p, file.string(), false);
  const std::string saved = testing::read_text(file);
  CHECK(saved == sim::placement_to_yaml(p));
  const sim::Placement q = sim::load_placement(file.string());
  CHECK(q.architecture == p.architecture);
  CHECK(q.cluster == p.cluster);
  CHECK(q.ep == p.ep);
  CHECK(q.tp == p.tp);
  CHECK(q.policy == p.policy);
  CHECK(q.trace_sha256 == p.trace_sha256);
  CHECK(q.layers == p.layers);
  CHECK(q.ranks == p.ranks);
  CHECK(q.report == p.report);
  CHECK(q.report.dump() == p.report.dump());  // the same JSON types (integer, unsigned, double), not only values
  CHECK(sim::placement_to_yaml(q) == saved);
  return q;
}

bool has_replica(const sim::Placement& p) {
  for (const auto& layer : p.ranks)
    for (const auto& holders : layer)
      if (holders.size() > 1) return true;
  return false;
}

const std::vector<Case> kCases = {{"contiguous"}, {"round_robin"}, {"random"},         {"greedy"},
                                  {"eplb", 4},    {"moetuner"},    {"moetuner_equal"}, {"moetuner_replicated", 4},
                                  {"exflow"}};

}  // namespace

TEST_CASE("placement round trip: every policy on Mixtral, 4 ranks of one GPU") {
  testing::TempDir dir;
  const auto arch = models::load_architecture("mixtral-8x7b");
  const auto cluster = models::load_cluster("h100-sxm-4gpu");
  Rng rng(11);
  sim::RoutingCounts routing = testing::skewed_mixtral_routing(arch, rng, 400, 60);
  routing.trace_sha256 = std::string(64, 'c');
  for (const Case& c : kCases) {
    CAPTURE(c.policy);
    const sim::Placement p = solve(c, arch, cluster, 4, 1, routing);
    const sim::Placement q = round_trip(p, dir / (c.policy + ".yaml"));
    if (c.replicas > 0) CHECK(has_replica(q));
    if (c.policy.starts_with("moetuner")) {
      // The nested report: stage reports with doubles, lists and strings.
      REQUIRE(q.report.contains("stage2"));
      CHECK(q.report["stage2"]["objective"].is_number_float());
      CHECK(q.report["stage2"]["objective"].get<double>() == p.report["stage2"]["objective"].get<double>());
      CHECK(q.report["stage2"]["experts_per_rank_target"].is_array());
      CHECK(q.report["stage1"]["status"].is_string());
      CHECK(q.trace_sha256 == routing.trace_sha256);
    }
  }
}

TEST_CASE("placement round trip: TP 2 on two nodes, an architecture stored by path") {
  testing::TempDir dir;
  // A copy of a shipped architecture under another file name is stored by its absolute path.
  const fs::path arch_file = dir / "my-mixtral.yaml";
  fs::copy_file(testing::source_dir() / "configs/architectures/mixtral-8x7b.yaml", arch_file);
  const auto arch = models::load_architecture(arch_file.string());
  const auto cluster = models::load_cluster("h200-2x8-800g");
  Rng rng(5);
  sim::RoutingCounts routing = testing::skewed_mixtral_routing(arch, rng, 300, 40);
  routing.trace_sha256 = std::string(64, 'd');
  for (const Case& c : {Case{"eplb", 8}, Case{"moetuner"}, Case{"moetuner_replicated", 8}}) {
    CAPTURE(c.policy);
    const sim::Placement p = solve(c, arch, cluster, 8, 2, routing);
    CHECK(fs::path(p.architecture).is_absolute());
    CHECK(p.cluster == "h200-2x8-800g");
    CHECK(p.tp == 2);
    round_trip(p, dir / (c.policy + ".yaml"));
  }
}
