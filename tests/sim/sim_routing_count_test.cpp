// Routing, counted twice: the simulator's GPU-to-GPU traffic matrix and tokens per EP rank must
// equal a count made token by token from the same step's batch with the dispatch rules of
// docs/simulator.md (a token goes once to each other rank holding one of its experts; a replica on
// the home rank, else on the home node round-robin by token index, else round-robin; hierarchical:
// once per other node to the gateway of the home GPU's local index, then forwarded), on the shipped
// DeepSeek-V2-Lite trace, up to 8 ranks (routing counts destination sets; without replicas in its
// own loop) and 16 (bit sets).
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "models/profile.hpp"
#include "sim/engine/engine.hpp"
#include "sim/engine/step_source.hpp"
#include "tests/sim/sim_fixtures.hpp"
#include "tests/support/test_support.hpp"
#include "traces/trace.hpp"

using namespace moesim;

namespace {

using moesim::testing::shipped_deepseek_trace;

struct Setup {
  models::Architecture arch = models::load_architecture("deepseek-v2-lite");
  models::Cluster cluster;
  models::Profile profile = models::load_profile("h100-sxm");
  sim::Placement placement;
  sim::Workload workload;
  sim::EngineOptions options;
  int ep = 8;
};

// Contiguous placement; with `replicate`, every fourth expert of every layer also on the rank
// ep/2 further on (another node on two nodes).
sim::Placement placement_for(const models::Architecture& a, int ep, bool replicate) {
  sim::Placement p = moesim::testing::identity_placement(a, ep);
  const int per = a.num_experts / ep;
  for (auto& layer : p.ranks)
    for (int e = 0; e < a.num_experts; ++e) {
      layer[static_cast<std::size_t>(e)] = {e / per};
      if (replicate && e % 4 == 0) layer[static_cast<std::size_t>(e)].push_back((e / per + ep / 2) % ep);
    }
  return p;
}

struct Expected {
  std::vector<std::vector<double>> traffic;  // bytes [src][dst]
  std::vector<std::vector<double>> rank_tokens;  // [MoE layer][rank]
};

// The first prefill step of the shipped trace, routed by hand.
Expected count_by_hand(const Setup& c) {
  auto reader = traces::open_trace(shipped_deepseek_trace());
  auto source = sim::make_prefill_source(*reader, c.ep, c.workload.tokens_per_step);
  sim::StepBatch batch;
  REQUIRE(source->next(batch));
  const int gpn = c.cluster.gpus_per_node;
  const auto node = [&](int r) { return r / gpn; };
  const std::size_t L = c.arch.moe_layers.size(), k = static_cast<std::size_t>(c.arch.top_k);
  const double tb = c.arch.hidden_size * 2.0;  // bf16, tp 1
  const bool hier = c.options.dispatch == sim::DispatchMode::kHierarchical;
  Expected x;
  x.traffic.assign(static_cast<std::size_t>(c.ep), std::vector<double>(static_cast<std::size_t>(c.ep), 0.0));
  x.rank_tokens.assign(L, std::vector<double>(static_cast<std::size_t>(c.ep), 0.0));
  auto send = [&](int a, int b) { x.traffic[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)] += tb; };
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const int h = batch.home[i];
    for (std::size_t l = 0; l < L; ++l) {
      std::set<int> dests;
      for (std::size_t j = 0; j < k; ++j) {
        const int e = batch.experts[(i * L + l) * k + j];
        const auto& holders = c.placement.ranks[l][static_cast<std::size_t>(e)];
        int r = -1;
        for (int x2 : holders)
          if (x2 == h) r = h;
        if (r < 0) {
          std::vector<int> near;
          for (int x2 : holders)
            if (node(x2) == node(h)) near.push_back(x2);
          r = !near.empty() ? near[batch.token_index[i] % near.size()] : holders[batch.token_index[i] % holders.size()];
        }
        x.rank_tokens[l][static_cast<std::size_t>(r)] += 1.0;
        if (r != h) dests.insert(r);
      }
      std::set<int> far_nodes;
      for (int r : dests) {
        if (!hier || node(r) == node(h)) {
          send(h, r);  // dispatch
          send(r, h);  // combine
          continue;
        }
        const int gw = node(r) * gpn + h % gpn;
        far_nodes.insert(node(r));
        if (r != gw) {
          send(gw, r);  // forwarded from the gateway
          send(r, gw);  // back to the gateway
        }
      }
      for (int n : far_nodes) {
        const int gw = n * gpn + h % gpn;
        send(h, gw);  // once per node each way
        send(gw, h);
      }
    }
  }
  return x;
}

void check_routing(const Setup& c) {
  moesim::testing::SimCase sc{&c.arch, &c.cluster, &c.profile, &c.placement, &c.workload, c.ep, c.options, {}};
  sc.open_trace = [] { return traces::open_trace(shipped_deepseek_trace()); };
  const auto r = moesim::testing::simulate_case(sc);
  const Expected x = count_by_hand(c);
  double total = 0.0;
  for (int a = 0; a < c.ep; ++a)
    for (int b = 0; b < c.ep; ++b) {
      INFO("traffic from " << a << " to " << b);
      CHECK(r.traffic[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)] ==
            doctest::Approx(x.traffic[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)]).epsilon(1e-12));
      total += x.traffic[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)];
    }
  CHECK(total > 0.0);
  std::size_t li = 0;
  for (const auto& layer : r.layers) {
    if (!layer.moe) continue;
    for (int rank = 0; rank < c.ep; ++rank) {
      INFO("MoE layer " << li << ", rank " << rank);
      CHECK(layer.rank_tokens[static_cast<std::size_t>(rank)] == x.rank_tokens[li][static_cast<std::size_t>(rank)]);
    }
    ++li;
  }
  CHECK(li == c.arch.moe_layers.size());
}

Setup prefill(models::Cluster cluster, int ep, sim::DispatchMode mode, bool replicate, int chunks) {
  Setup c;
  c.cluster = std::move(cluster);
  c.ep = ep;
  c.placement = placement_for(c.arch, ep, replicate);
  c.workload.mode = sim::WorkloadMode::kPrefill;
  c.workload.tokens_per_step = 512;
  c.options.steps = 1;
  c.options.dispatch = mode;
  c.options.contention = false;
  c.options.layer_chunks.assign(static_cast<std::size_t>(c.arch.num_layers), chunks);
  return c;
}

// 2 nodes of 4 GPUs.
models::Cluster two_by_four() {
  models::Cluster cl = moesim::testing::toy_cluster(8, 450e9, 1e-6);
  cl.num_nodes = 2;
  cl.gpus_per_node = 4;
  cl.nics.gpu_nic = {0, 0, 0, 0};
  return cl;
}

}  // namespace

TEST_CASE("sim: routing up to 8 ranks gives the traffic and tokens per rank counted token by token") {
  const auto one_node = models::load_cluster("h100-sxm-8gpu");
  SUBCASE("one node, flat") { check_routing(prefill(one_node, 8, sim::DispatchMode::kFlat, false, 1)); }
  SUBCASE("one node, four chunks") { check_routing(prefill(one_node, 8, sim::DispatchMode::kFlat, false, 4)); }
  SUBCASE("one node, replicas, two chunks") { check_routing(prefill(one_node, 8, sim::DispatchMode::kFlat, true, 2)); }
  SUBCASE("two nodes, hierarchical") { check_routing(prefill(two_by_four(), 8, sim::DispatchMode::kHierarchical, false, 1)); }
  SUBCASE("two nodes, hierarchical, three chunks") {
    check_routing(prefill(two_by_four(), 8, sim::DispatchMode::kHierarchical, false, 3));
  }
  SUBCASE("two nodes, hierarchical, replicas, two chunks") {
    check_routing(prefill(two_by_four(), 8, sim::DispatchMode::kHierarchical, true, 2));
  }
  SUBCASE("four ranks") { check_routing(prefill(one_node, 4, sim::DispatchMode::kFlat, true, 1)); }
}

TEST_CASE("sim: routing over 16 ranks on two nodes gives the traffic counted token by token") {
  const auto two_nodes = models::load_cluster("h200-2x8-800g");
  SUBCASE("flat") { check_routing(prefill(two_nodes, 16, sim::DispatchMode::kFlat, true, 1)); }
  SUBCASE("hierarchical") { check_routing(prefill(two_nodes, 16, sim::DispatchMode::kHierarchical, true, 2)); }
}
