// Hierarchical dispatch and combine against DeepEP's published internode normal kernels on H800
// (models/reference/deepep/legacy.md: 4096 tokens per GPU, hidden 7168, 256 experts, top-8 within
// the top-4 node groups, FP8 dispatch, BF16 combine; EP16, EP32, EP64 over 400 Gb/s CX7 NICs).
// The setup is DeepEP's test (tests/legacy/test_internode.py at deepseek-ai/DeepEP @dd758caf): the
// same routing rule and the same bandwidth figure, "RDMA bottleneck bandwidth" = (token, node) pairs,
// the token's own node included, x the token's bytes / the kernel's time. The engine runs one MoE
// layer of DeepSeek-V3 (hierarchical, pipelined forwarding) on an 8-GPU-per-node H800 cluster built
// from datasheet figures and the h100-sxm profile (H800 has the H100's SMs and NVLink generation); the
// kernel time is the span of the layer's dispatch (combine) stream operations over all GPUs; NVLink
// forwarding moves no faster than the profile's normal_kernels rates (DeepEP measured on H200 by
// others). Nothing here was fitted to these rows. The table it prints is docs/validation.md's.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <numeric>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "models/costs.hpp"
#include "sim/engine/step_graph.hpp"
#include "tests/sim/sim_fixtures.hpp"

using namespace moesim;

namespace {

constexpr int kTokensPerGpu = 4096;
constexpr int kTopK = 8;
constexpr int kLowLatencyTokens = 128;

struct Published {
  int ep = 0;
  double dispatch_GBps = 0.0, combine_GBps = 0.0;
};

// The internode rows of "Normal kernels with NVLink and RDMA forwarding".
std::vector<Published> published_internode() {
  const std::string text = testing::read_text(testing::reference_dir() / "deepep/legacy.md");
  const std::regex row(R"(\|\s*Internode\s*\|\s*(\d+)\s*\|\s*(\d+)\s*GB/s \(RDMA\)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*GB/s)");
  std::vector<Published> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), row); it != std::sregex_iterator(); ++it) {
    REQUIRE((*it)[1] == (*it)[3]);
    out.push_back({std::stoi((*it)[1]), std::stod((*it)[2]), std::stod((*it)[4])});
  }
  return out;
}

// DeepEP's routing: scores |N(0,1)| + 1 per expert; a node group's score is its best expert's; the
// token picks the top min(nodes, 4) groups, then its top-8 experts inside them.
std::vector<int> route(std::mt19937_64& rng, int experts, int nodes) {
  std::normal_distribution<double> normal;
  std::vector<double> score(static_cast<std::size_t>(experts));
  for (double& s : score) s = std::fabs(normal(rng)) + 1.0;
  const int per_node = experts / nodes;
  std::vector<int> groups(static_cast<std::size_t>(nodes));
  std::iota(groups.begin(), groups.end(), 0);
  auto group_score = [&](int gi) {
    return *std::max_element(score.begin() + gi * per_node, score.begin() + (gi + 1) * per_node);
  };
  const int keep = std::min(nodes, 4);
  std::partial_sort(groups.begin(), groups.begin() + keep, groups.end(),
                    [&](int a, int b) { return group_score(a) > group_score(b); });
  std::vector<int> allowed;
  for (int gi = 0; gi < keep; ++gi)
    for (int e = groups[static_cast<std::size_t>(gi)] * per_node; e < (groups[static_cast<std::size_t>(gi)] + 1) * per_node; ++e)
      allowed.push_back(e);
  std::partial_sort(allowed.begin(), allowed.begin() + kTopK, allowed.end(),
                    [&](int a, int b) { return score[static_cast<std::size_t>(a)] > score[static_cast<std::size_t>(b)]; });
  return {allowed.begin(), allowed.begin() + kTopK};
}

struct Measured {
  double dispatch_s = 0.0, combine_s = 0.0;
  double node_pairs = 0.0;  // (token, destination node) pairs, the token's own node included
};

// The span of a category's stream operations over all GPUs of the recorded step.
double category_span(const sim::SimResult& r, sim::Category cat) {
  double begin = 1e30, end = 0.0;
  for (const auto& ev : r.timeline)
    if (ev.category == static_cast<std::uint8_t>(cat)) {
      begin = std::min(begin, ev.begin);
      end = std::max(end, ev.end);
    }
  REQUIRE(end > begin);
  return end - begin;
}

// One DeepSeek-V3 MoE layer on EP GPUs of H800 SXM nodes: 8 GPUs on NVLink at 400 GB/s both ways
// (200 per direction, the H800 datasheet), one 400 Gb/s CX7 NIC per GPU on a rail-optimized
// network, as DeepEP's cluster, with the h100-sxm profile; DeepEP's placement, expert e on rank
// e / (experts / ranks). One step, no contention, its timeline recorded.
testing::SimSetup h800_setup(int ep, sim::DispatchMode mode) {
  const int nodes = std::max(1, ep / 8);
  testing::SimSetup c;
  c.arch = models::load_architecture("deepseek-v3");
  c.arch.num_layers = 1;
  c.arch.moe_layers = {0};
  REQUIRE(c.arch.dtype == models::Dtype::kFp8);
  REQUIRE(c.arch.hidden_size == 7168);
  REQUIRE(c.arch.num_experts == 256);
  c.cluster = models::load_cluster("h200-2x8-400g-per-gpu");
  c.cluster.name = "h800-" + std::to_string(nodes) + "x8";
  c.cluster.num_nodes = nodes;
  c.cluster.intra_node.bandwidth = 200e9;
  c.cluster.inter_node.spine_bandwidth = 50e9 * nodes;
  c.profile = models::load_profile("h100-sxm");
  c.ep = ep;
  c.placement.architecture = c.arch.name;
  c.placement.ep = ep;
  c.placement.layers = c.arch.moe_layers;
  c.placement.policy = "contiguous";
  c.placement.ranks.assign(1, {});
  for (int e = 0; e < c.arch.num_experts; ++e) c.placement.ranks[0].push_back({e / (c.arch.num_experts / ep)});
  c.workload.mode = sim::WorkloadMode::kPrefill;
  c.options.steps = 1;
  c.options.warmup_steps = 0;
  c.options.timeline_steps = 1;
  c.options.layer_chunks = {1};
  c.options.contention = false;
  c.options.dispatch = mode;
  return c;
}

Measured run_ep(int ep) {
  const int nodes = ep / 8;
  testing::SimSetup c = h800_setup(ep, sim::DispatchMode::kHierarchical);
  // One sequence of 4096 tokens per rank (sequence s lives on rank s mod EP).
  Measured m;
  std::mt19937_64 rng(20251202);
  c.memory = testing::toy_trace(c.arch, ep, kTokensPerGpu, [&](int, int) {
    std::vector<int> e = route(rng, c.arch.num_experts, nodes);
    std::vector<int> seen;
    for (int x : e) {
      const int node = x / (c.arch.num_experts / nodes);
      if (std::find(seen.begin(), seen.end(), node) == seen.end()) seen.push_back(node);
    }
    m.node_pairs += static_cast<double>(seen.size());
    return e;
  });
  c.workload.tokens_per_step = static_cast<long>(kTokensPerGpu) * ep;
  const sim::SimResult r = testing::simulate_setup(c, c.options);
  m.dispatch_s = category_span(r, sim::Category::kDispatch);
  m.combine_s = category_span(r, sim::Category::kCombine);
  m.node_pairs /= ep;  // per rank, as DeepEP's rank 0 reports it
  return m;
}

}  // namespace

TEST_CASE("deepep: hierarchical dispatch and combine against DeepEP's internode normal kernels (H800)") {
  const std::vector<Published> rows = published_internode();
  REQUIRE(rows.size() == 3);
  const double hidden = 7168.0;
  const double fp8 = models::dispatch_element_bytes(models::Dtype::kFp8);    // FP8 + a scale per 128
  const double bf16 = models::combine_element_bytes(models::Dtype::kFp8);   // BF16
  REQUIRE(fp8 == doctest::Approx((1.0 + 4.0 / 128.0)));  // DeepEP's fp8_factor x 2 bytes
  std::printf("%5s %9s %9s %9s %7s %9s %9s %9s %7s\n", "EP", "disp us", "model", "published", "error", "comb us",
              "model", "published", "error");
  for (const Published& p : rows) {
    CAPTURE(p.ep);
    const Measured m = run_ep(p.ep);
    const double d = m.node_pairs * hidden * fp8 / m.dispatch_s / 1e9;
    const double cb = m.node_pairs * hidden * bf16 / m.combine_s / 1e9;
    const double ed = d / p.dispatch_GBps - 1.0, ec = cb / p.combine_GBps - 1.0;
    std::printf("%5d %9.0f %9.1f %9.0f %+6.1f%% %9.0f %9.1f %9.0f %+6.1f%%\n", p.ep, m.dispatch_s * 1e6, d,
                p.dispatch_GBps, 100 * ed, m.combine_s * 1e6, cb, p.combine_GBps, 100 * ec);
    // The validation plan's bound, 15%. Measured here: dispatch +2.0% / -2.9% / -0.5%, combine
    // +1.9% / -6.7% / -5.6% (EP16 / 32 / 64). EP16 is bound by the NVLink forwarding, which moves at
    // the rate DeepEP's SMs forward (the profile's normal_kernels, measured on 2 x 8 H200 and not on
    // these rows); without that limit EP16's dispatch was +34.8%.
    CHECK(std::fabs(ec) < 0.15);
    CHECK(std::fabs(ed) < 0.15);
  }
}

TEST_CASE("deepep: the forwarding limit applies to hierarchical kernels across nodes only") {
  // 512 tokens per GPU, DeepEP's routing; spans with and without the profile's normal_kernels.
  auto spans = [](int ep, sim::DispatchMode mode, bool limit) {
    testing::SimSetup c = h800_setup(ep, mode);
    if (!limit) c.profile.normal = {};
    std::mt19937_64 rng(7);
    const int nodes = std::max(1, ep / 8);
    c.memory = testing::toy_trace(c.arch, ep, 512, [&](int, int) { return route(rng, c.arch.num_experts, nodes); });
    c.workload.tokens_per_step = 512L * ep;
    const sim::SimResult r = testing::simulate_setup(c, c.options);
    return std::pair{category_span(r, sim::Category::kDispatch), category_span(r, sim::Category::kCombine)};
  };
  REQUIRE(models::has_source(models::load_profile("h100-sxm").normal.provenance));
  // Two nodes, hierarchical: bound by NVLink forwarding, so slower with the limit.
  const auto with = spans(16, sim::DispatchMode::kHierarchical, true);
  const auto without = spans(16, sim::DispatchMode::kHierarchical, false);
  CHECK(with.first > without.first * 1.05);
  CHECK(with.second > without.second * 1.02);
  // One node (DeepEP's intranode kernels forward nothing) and flat dispatch: unchanged.
  const auto one_with = spans(8, sim::DispatchMode::kHierarchical, true);
  const auto one_without = spans(8, sim::DispatchMode::kHierarchical, false);
  CHECK(one_with.first == doctest::Approx(one_without.first).epsilon(1e-12));
  CHECK(one_with.second == doctest::Approx(one_without.second).epsilon(1e-12));
  const auto flat_with = spans(16, sim::DispatchMode::kFlat, true);
  const auto flat_without = spans(16, sim::DispatchMode::kFlat, false);
  CHECK(flat_with.first == doctest::Approx(flat_without.first).epsilon(1e-12));
  CHECK(flat_with.second == doctest::Approx(flat_without.second).epsilon(1e-12));
}

namespace {

// DeepEP's low-latency rows ("Low-latency kernels with pure RDMA"): EP, dispatch and combine times.
struct PublishedLowLatency {
  int ep = 0;
  double dispatch_us = 0.0, combine_us = 0.0;
};

std::vector<PublishedLowLatency> published_low_latency() {
  const std::string text = testing::read_text(testing::reference_dir() / "deepep/legacy.md");
  const std::regex row(R"(\|\s*(\d+)\s*\|\s*(\d+) us\s*\|\s*\d+ GB/s\s*\|\s*(\d+)\s*\|\s*(\d+) us\s*\|)");
  std::vector<PublishedLowLatency> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), row); it != std::sregex_iterator(); ++it) {
    REQUIRE((*it)[1] == (*it)[3]);
    out.push_back({std::stoi((*it)[1]), std::stod((*it)[2]), std::stod((*it)[4])});
  }
  return out;
}

// DeepEP's low-latency test (tests/legacy/test_low_latency.py @dd758caf): 128 tokens per GPU, each
// picks its top-8 of |N(0,1)| + 1 scores over all experts (no node groups); DeepSeek-V3's 256
// experts, expert e on rank e / (256 / EP). One MoE layer in dispatch.mode low_latency on H800
// nodes as above (one node for EP8); the kernel time is the span of the dispatch (combine) stream
// operations over all GPUs.
Measured run_low_latency(int ep) {
  testing::SimSetup c = h800_setup(ep, sim::DispatchMode::kLowLatency);
  REQUIRE(models::has_source(c.profile.low_latency.provenance));
  std::mt19937_64 rng(20251203);
  std::normal_distribution<double> normal;
  c.memory = testing::toy_trace(c.arch, ep, kLowLatencyTokens, [&](int, int) {
    std::vector<double> score(static_cast<std::size_t>(c.arch.num_experts));
    for (double& s : score) s = std::fabs(normal(rng)) + 1.0;
    std::vector<int> e(score.size());
    std::iota(e.begin(), e.end(), 0);
    std::partial_sort(e.begin(), e.begin() + kTopK, e.end(),
                      [&](int a, int b) { return score[static_cast<std::size_t>(a)] > score[static_cast<std::size_t>(b)]; });
    return std::vector<int>(e.begin(), e.begin() + kTopK);
  });
  c.workload.tokens_per_step = static_cast<long>(kLowLatencyTokens) * ep;
  const sim::SimResult r = testing::simulate_setup(c, c.options);
  Measured m;
  m.dispatch_s = category_span(r, sim::Category::kDispatch);
  m.combine_s = category_span(r, sim::Category::kCombine);
  return m;
}

}  // namespace

TEST_CASE("deepep: low-latency dispatch and combine against DeepEP's low-latency kernels (H800)") {
  const std::vector<PublishedLowLatency> rows = published_low_latency();
  REQUIRE(rows.size() == 6);
  std::printf("%5s %9s %9s %7s %9s %9s %7s\n", "EP", "disp us", "published", "error", "comb us", "published", "error");
  for (const PublishedLowLatency& p : rows) {
    // EP128 and EP256: 16k-65k concurrent flows per phase, too slow for the suite (docs/validation.md);
    // MOESIM_DEEPEP_ALL=1 runs them too.
    if (p.ep > 64 && std::getenv("MOESIM_DEEPEP_ALL") == nullptr) continue;
    CAPTURE(p.ep);
    const Measured m = run_low_latency(p.ep);
    const double ed = m.dispatch_s * 1e6 / p.dispatch_us - 1.0, ec = m.combine_s * 1e6 / p.combine_us - 1.0;
    std::printf("%5d %9.0f %9.0f %+6.1f%% %9.0f %9.0f %+6.1f%%\n", p.ep, m.dispatch_s * 1e6, p.dispatch_us, 100 * ed,
                m.combine_s * 1e6, p.combine_us, 100 * ec);
    // EP8 is the row the kernels' fixed costs come from (tools/build_profiles.py); EP16-64 are held
    // out, at the validation plan's 15%.
    CHECK(std::fabs(ed) < 0.15);
    CHECK(std::fabs(ec) < 0.15);
  }
}
