// Placements scored on traffic the solver did not see (the shipped DeepSeek-V2-Lite trace, split by
// sequence: profile on one half, evaluate on the other), the stage-2 objective recomputed from a
// placement file, and bad placement files for evaluation and export (exports: placement_export_test.cpp).
#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>

#include "common/error.hpp"
#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "sim/placement/evaluate.hpp"
#include "sim/placement/placement.hpp"
#include "sim/placement/policy.hpp"
#include "sim/placement/routing_counts.hpp"
#include "sim/placement/routing_rule.hpp"
#include "sim/placement/traffic.hpp"
#include "tests/support/test_support.hpp"
#include "traces/import.hpp"
#include "traces/memory_trace.hpp"
#include "traces/split.hpp"

using namespace moesim;
namespace fs = std::filesystem;

namespace {

std::string shipped_trace() { return (testing::source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string(); }

struct Split {
  std::string profile, heldout;
};

Split split_shipped(const testing::TempDir& dir) {
  Split s{(dir / "profile.mtr").string(), (dir / "heldout.mtr").string()};
  auto reader = traces::open_trace(shipped_trace());
  traces::SplitOptions o;
  o.fraction = 0.5;
  o.seed = 1;
  traces::split_trace(*reader, traces::file_writer_factory(s.profile, traces::Encoding::kBinary, false),
                      traces::file_writer_factory(s.heldout, traces::Encoding::kBinary, false), o);
  return s;
}

sim::RoutingCounts counts_of(const std::string& path) {
  auto reader = traces::open_trace(path);
  return sim::count_routing(*reader, std::string(64, 'a'));
}

std::string solve(const std::string& policy, const models::Architecture& arch, const models::Cluster& cluster, int ep,
                  const sim::RoutingCounts& routing, const fs::path& out, int replicas = 0, int tp = 1) {
  const auto registry = sim::default_placement_registry();
  sim::PlacementInput input{arch, cluster, ep, tp, &routing, {}};
  input.options.replicas = replicas;
  const sim::Placement p = registry.create(policy)->place(input);
  sim::save_placement(p, out.string(), false);
  return out.string();
}

}  // namespace

TEST_CASE("held-out DeepSeek-V2-Lite: moetuner and eplb lower the per-layer max load against contiguous") {
  testing::TempDir dir;
  const Split split = split_shipped(dir);
  const sim::RoutingCounts profile = counts_of(split.profile);
  const auto arch = models::load_architecture("deepseek-v2-lite");
  const auto cluster = models::load_cluster("h100-sxm-8gpu");
  std::map<std::string, sim::PlacementEvaluation> eval;
  for (const std::string policy : {"contiguous", "eplb", "moetuner", "moetuner_equal", "greedy"}) {
    const std::string file = solve(policy, arch, cluster, 8, profile, dir / (policy + ".yaml"));
    eval[policy] = sim::evaluate_placement(sim::load_checked_placement(file), split.heldout);
    MESSAGE(policy << ": mean max/mean " << eval[policy].mean_max_over_mean << ", worst "
                   << eval[policy].worst_max_over_mean << ", sum of layer max " << eval[policy].sum_layer_max
                   << ", off GPU " << eval[policy].share_off_gpu);
  }
  const double base = eval["contiguous"].sum_layer_max;
  CHECK(eval["moetuner"].sum_layer_max < 0.9 * base);
  CHECK(eval["eplb"].sum_layer_max < 0.9 * base);
  CHECK(eval["moetuner"].mean_max_over_mean < eval["contiguous"].mean_max_over_mean);
  CHECK(eval["moetuner_equal"].sum_layer_max < 0.9 * base);
  // moetuner_equal keeps 8 experts on every rank of every layer.
  const sim::Placement eq = sim::load_placement((dir / "moetuner_equal.yaml").string());
  for (std::size_t l = 0; l < eq.layers.size(); ++l)
    for (int r = 0; r < 8; ++r) CHECK(eq.experts_on(l, r).size() == 8);
  // Every dispatch counted once per (token, layer, destination); shares are shares.
  for (const auto& [name, e] : eval) {
    CHECK(e.share_off_node == 0.0);  // one node
    CHECK(e.share_hops_off_node == 0.0);
    CHECK(e.share_off_gpu > 0.0);
    CHECK(e.share_off_gpu < 1.0);
    double mean_sum = 0.0;
    for (double m : e.layer_mean) mean_sum += m;
    CHECK(mean_sum * 8 == doctest::Approx(static_cast<double>(e.tokens) * 6 * 26));
  }
}

TEST_CASE("moetuner: the stage-2 objective in the file equals the one recomputed from the file and the trace") {
  testing::TempDir dir;
  const Split split = split_shipped(dir);
  const sim::RoutingCounts profile = counts_of(split.profile);
  const auto arch = models::load_architecture("deepseek-v2-lite");
  const auto cluster = models::load_cluster("h200-2x8-800g");
  // 8 EP ranks of 2 GPUs on two nodes: NVLink inside, the NIC between.
  const std::string file = solve("moetuner", arch, cluster, 8, profile, dir / "m.yaml", 0, 2);
  const sim::Placement p = sim::load_placement(file);
  const double reported = p.report["stage2"]["objective"].get<double>();
  CHECK(reported > 0.0);
  CHECK(sim::placement_traffic_objective(p, profile, arch, cluster) == doctest::Approx(reported).epsilon(1e-12));
  CHECK(p.report["stage2"]["bound"].get<double>() <= reported);
  CHECK(p.report["stage1"]["bound"].get<double>() <= p.report["stage1"]["objective"].get<double>() + 1e-9);
  // The memory balance: experts per rank over all layers within one of E * L / G.
  int lo = 1 << 30, hi = 0;
  for (int r = 0; r < 8; ++r) {
    int n = 0;
    for (std::size_t l = 0; l < p.layers.size(); ++l) n += static_cast<int>(p.experts_on(l, r).size());
    lo = std::min(lo, n);
    hi = std::max(hi, n);
  }
  CHECK(lo == 64 * 26 / 8);
  CHECK(hi == 64 * 26 / 8);
  CHECK(p.report["stage2"]["pairs_not_proven"].is_array());
}

TEST_CASE("held-out cross-layer hops between nodes: counted token by token from the trace") {
  testing::TempDir dir;
  const Split split = split_shipped(dir);
  const sim::RoutingCounts profile = counts_of(split.profile);
  const auto arch = models::load_architecture("deepseek-v2-lite");
  const auto cluster = models::load_cluster("h200-2x8-800g");  // 8 EP ranks of 2 GPUs, 4 per node
  const std::vector<int> node = sim::rank_nodes(cluster, 8, 2);
  std::map<std::string, double> share;
  for (const std::string policy : {"contiguous", "moetuner"}) {
    const std::string file = solve(policy, arch, cluster, 8, profile, dir / (policy + "-2x4.yaml"), 0, 2);
    const sim::Placement p = sim::load_placement(file);
    const sim::PlacementEvaluation e = sim::evaluate_placement(sim::load_checked_placement(file), split.heldout);
    // Every (layer l expert, layer l+1 expert) pair of every token; no replicas, so one rank each.
    std::vector<int> rank_of(26 * 64, -1);
    for (std::size_t l = 0; l < 26; ++l)
      for (int r = 0; r < 8; ++r)
        for (int x : p.experts_on(l, r)) rank_of[l * 64 + static_cast<std::size_t>(x)] = r;
    double pairs = 0, off = 0;
    auto reader = traces::open_trace(split.heldout);
    traces::TokenBlock block;
    while (reader->next(block, 4096))
      for (std::size_t t = 0; t < block.size(); ++t)
        for (std::size_t l = 0; l + 1 < 26; ++l)
          for (std::size_t a = 0; a < 6; ++a)
            for (std::size_t b = 0; b < 6; ++b) {
              const int ra = rank_of[l * 64 + block.experts[(t * 26 + l) * 6 + a]];
              const int rb = rank_of[(l + 1) * 64 + block.experts[(t * 26 + l + 1) * 6 + b]];
              pairs += 1;
              off += node[static_cast<std::size_t>(ra)] != node[static_cast<std::size_t>(rb)] ? 1 : 0;
            }
    INFO(policy);
    CHECK(e.share_hops_off_node == doctest::Approx(off / pairs).epsilon(1e-12));
    share[policy] = e.share_hops_off_node;
  }
  // Contiguous keeps experts 0..31 on the first node in every layer; MoETuner's stage 2 co-locates
  // the heavy cross-layer pairs, so fewer hops cross.
  CHECK(share["moetuner"] < share["contiguous"]);
}

TEST_CASE("bad placements for evaluation and export: memory, missing expert, rank out of range") {
  const fs::path data = testing::test_data_dir() / "placements";
  try {
    sim::load_checked_placement((data / "bad_placement_memory.yaml").string());
    FAIL("expected an InputError");
  } catch (const common::InputError& e) {
    const std::string what = e.what();
    CHECK(what.find("bad_placement_memory.yaml") != std::string::npos);
    CHECK(what.find("rank 0 holds 256 routed experts") != std::string::npos);
  }
  CHECK_THROWS_AS(sim::load_checked_placement((data / "bad_placement_expert_missing.yaml").string()),
                  common::InputError);
  CHECK_THROWS_AS(sim::load_checked_placement((data / "bad_placement_rank_out_of_range.yaml").string()),
                  common::InputError);
}
