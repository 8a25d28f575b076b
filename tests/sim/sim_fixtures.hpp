// Small hand-built architectures, clusters and profiles for the simulator's physics tests: every
// number is chosen so the expected result can be computed by hand.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "models/profile.hpp"
#include "sim/placement/placement.hpp"
#include "sim/engine/engine.hpp"
#include "sim/engine/step_source.hpp"
#include "tests/support/test_support.hpp"
#include "traces/memory_trace.hpp"
#include "traces/trace.hpp"

namespace moesim::testing {

// One MoE layer (decoder layer 0), `experts` experts, top-k, hidden 1024, expert FFN 1024, bf16.
inline models::Architecture toy_arch(int experts, int top_k) {
  models::Architecture a;
  a.name = "toy";
  a.num_layers = 1;
  a.moe_layers = {0};
  a.hidden_size = 1024;
  a.num_experts = experts;
  a.expert_ffn_size = 1024;
  a.top_k = top_k;
  a.activation = "swiglu";
  a.ffn_projections = 3;
  a.attention.kind = "mha";
  a.attention.num_heads = 8;
  a.attention.num_kv_heads = 8;
  a.attention.head_dim = 128;
  a.vocab_size = 1024;
  a.dtype = models::Dtype::kBf16;
  return a;
}

// One node of `gpus` GPUs on an NVSwitch of `bandwidth` B/s per direction and `latency` s.
inline models::Cluster toy_cluster(int gpus, double bandwidth, double latency) {
  models::Cluster c;
  c.name = "toy-cluster";
  c.source_file = "toy-cluster";
  c.num_nodes = 1;
  c.gpus_per_node = gpus;
  c.gpu_kind = "toy";
  c.gpu_memory = 80e9;
  c.intra_node.kind = models::FabricKind::kNvswitch;
  c.intra_node.bandwidth = bandwidth;
  c.intra_node.latency = latency;
  c.nics.per_node = 1;
  c.nics.bandwidth = 50e9;
  c.nics.latency = 2e-6;
  c.nics.gpu_nic.assign(static_cast<std::size_t>(gpus), 0);
  return c;
}

// A profile with a linear GEMM curve (1 ns per token for the 1024 x 1024 shape, 1 us floor),
// constant contention factors, and round power numbers.
inline models::Profile toy_profile(double compute_slowdown = 1.25, double comm_slowdown = 1.10) {
  models::Profile p;
  p.name = "toy";
  models::GemmTable t;
  t.dtype = models::Dtype::kBf16;
  t.peak_flops = 1e15;
  models::GemmCurve curve;
  curve.n = 1024;
  curve.k = 1024;
  curve.m = {1, 1000, 1000000};
  curve.time = {1e-6, 1e-6, 1e-3};
  t.curves.push_back(curve);
  p.gemm.push_back(t);
  p.device.hbm_bandwidth = 3e12;
  p.nvlink.bandwidth_efficiency = 1.0;
  p.nvlink.latency = 0.0;
  p.pcie.bandwidth_efficiency = 1.0;
  p.nic.bandwidth_efficiency = 1.0;
  models::ContentionPoint cp;
  cp.comm_op = std::nullopt;  // "any"
  cp.comm_bytes = 1.0;
  cp.gemm_flops = 1.0;
  cp.compute_slowdown = compute_slowdown;
  cp.comm_slowdown = comm_slowdown;
  p.contention.points.push_back(cp);
  p.power.idle = 100.0;
  p.power.compute[models::Dtype::kBf16] = 500.0;
  p.power.communication = 200.0;
  p.power.overlapped[models::Dtype::kBf16] = 600.0;
  p.power.max_power = 700.0;
  p.power.min_power_limit = 200.0;
  p.power.cap_fraction = {200.0 / 700.0, 350.0 / 700.0, 1.0};
  p.power.speed_fraction = {0.4, 0.7, 1.0};
  return p;
}

inline sim::Placement identity_placement(const models::Architecture& a, int ep) {
  sim::Placement p;
  p.architecture = a.name;
  p.ep = ep;
  p.layers = a.moe_layers;
  p.policy = "test";
  p.ranks.assign(a.moe_layers.size(), {});
  for (auto& layer : p.ranks)
    for (int e = 0; e < a.num_experts; ++e) layer.push_back({e % ep});
  return p;
}

// A trace of `sequences` sequences of `length` tokens; token t of every sequence goes to experts
// `route(seq, t)` (k ids).
template <typename F>
traces::MemoryTrace toy_trace(const models::Architecture& a, int sequences, int length, F route) {
  traces::MemoryTrace m;
  m.meta.shape = a.trace_shape();
  m.meta.source = "test";
  for (int s = 0; s < sequences; ++s)
    for (int t = 0; t < length; ++t) {
      m.tokens.sequence.push_back(static_cast<std::uint32_t>(s));
      m.tokens.position.push_back(static_cast<std::uint32_t>(t));
      for (int e : route(s, t)) m.tokens.experts.push_back(static_cast<std::uint16_t>(e));
    }
  m.meta.token_count = m.tokens.size();
  m.meta.sequence_count = static_cast<std::uint64_t>(sequences);
  return m;
}

// What one simulation of a test reads.
struct SimCase {
  const models::Architecture* arch = nullptr;
  const models::Cluster* cluster = nullptr;
  const models::Profile* profile = nullptr;
  const sim::Placement* placement = nullptr;
  const sim::Workload* workload = nullptr;
  int ep = 1;
  sim::EngineOptions options;
  // Opens the routing trace in the child; empty for workloads without one.
  std::function<std::unique_ptr<traces::TraceReader>()> open_trace;
};

// Simulates `c` in a forked child (one SimGrid engine per process), with the step source its
// workload mode reads: decode, else prefill (also the micro-batches of MoE training).
inline sim::SimResult simulate_case(const SimCase& c) {
  return sim::run_isolated([&] {
    std::unique_ptr<traces::TraceReader> reader;
    if (c.open_trace) reader = c.open_trace();
    std::unique_ptr<sim::StepSource> source;
    if (reader && c.workload->mode == sim::WorkloadMode::kDecode)
      source = sim::make_decode_source(*reader, c.ep, c.workload->batch_sequences, c.workload->decode_staggered);
    else if (reader)
      source = sim::make_prefill_source(*reader, c.ep, c.workload->tokens_per_step);
    sim::EngineInput in;
    in.arch = c.arch;
    in.cluster = c.cluster;
    in.profile = c.profile;
    in.placement = c.placement;
    in.ep = c.ep;
    in.tp = 1;
    in.workload = c.workload;
    in.steps = source.get();
    in.options = c.options;
    return sim::simulate(in);
  });
}

// A whole simulation input held by value, for tests that run one setup several ways.
struct SimSetup {
  models::Architecture arch;
  models::Cluster cluster;
  models::Profile profile;
  sim::Placement placement;
  sim::Workload workload;
  sim::EngineOptions options;
  std::string trace;           // a trace file, "" for none
  traces::MemoryTrace memory;  // or a trace in memory (used when it holds tokens)
  int ep = 1;
};

// Simulates `c` with `options` in place of its own.
inline sim::SimResult simulate_setup(const SimSetup& c, const sim::EngineOptions& options) {
  SimCase sc{&c.arch, &c.cluster, &c.profile, &c.placement, &c.workload, c.ep, options, {}};
  if (!c.trace.empty()) sc.open_trace = [&] { return traces::open_trace(c.trace); };
  if (c.memory.tokens.size() > 0) sc.open_trace = [&] { return traces::read_memory_trace(c.memory); };
  return simulate_case(sc);
}

inline std::string shipped_deepseek_trace() {
  return (source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string();
}

// DeepSeek-V2-Lite on one 8 x H100 SXM node replaying the shipped trace, overlapped in two chunks
// with contention (so that it happens): 2 warmup and 7 measured steps, the timeline of 3.
inline SimSetup shipped_deepseek_setup(sim::WorkloadMode mode) {
  SimSetup c;
  c.arch = models::load_architecture("deepseek-v2-lite");
  c.cluster = models::load_cluster("h100-sxm-8gpu");
  c.profile = models::load_profile("h100-sxm");
  c.ep = 8;
  c.placement = identity_placement(c.arch, c.ep);
  c.trace = shipped_deepseek_trace();
  c.workload.mode = mode;
  c.workload.batch_sequences = 16;
  c.workload.tokens_per_step = 256;
  c.options.warmup_steps = 2;
  c.options.steps = 7;
  c.options.timeline_steps = 3;
  c.options.contention = true;
  c.options.layer_chunks.assign(static_cast<std::size_t>(c.arch.num_layers), 2);
  return c;
}

// The rails cluster h200-2x8-400g-per-gpu rebuilt as an oversubscribed two-level fat tree (50 GB/s
// links, 1 us): its uplinks fill, so flows of different GPUs share them.
inline models::Cluster oversubscribed_fat_tree() {
  models::Cluster c = models::load_cluster("h200-2x8-400g-per-gpu");
  auto& net = c.inter_node;
  net.topology = models::TopologyKind::kFatTree;
  net.levels = 2;
  net.down = {8, 2};
  net.up = {2, 1};
  net.parallel_links = {1, 1};
  net.link_bandwidth = 50e9;
  net.link_latency = 1e-6;
  return c;
}

// MoE training of the toy architecture (4 experts, top-2) on 2 GPUs, two micro-batches of 64
// tokens overlapped in two chunks: 1 warmup and 4 measured steps.
inline SimSetup toy_moe_training_setup() {
  SimSetup c;
  c.arch = toy_arch(4, 2);
  c.cluster = toy_cluster(2, 50e9, 2e-6);
  c.profile = toy_profile();
  c.ep = 2;
  c.placement = identity_placement(c.arch, c.ep);
  c.memory = toy_trace(c.arch, 6, 40, [](int s, int t) {
    const int a = (s + t) % 4, b = (s + 2 * t + 1 + a) % 4;
    return std::vector<int>{a, b == a ? (a + 1) % 4 : b};
  });
  c.workload.mode = sim::WorkloadMode::kTraining;
  c.workload.tokens_per_step = 64;
  c.workload.micro_batches = 2;
  c.options.warmup_steps = 1;
  c.options.steps = 4;
  c.options.layer_chunks.assign(static_cast<std::size_t>(c.arch.num_layers), 2);
  return c;
}

// The synthetic workload on 4 GPUs: 3 layers of 50 us compute and a 1 MiB all-to-all, 1 warmup and
// 4 measured steps; `overlap`: each all-to-all with the compute before it.
inline SimSetup toy_synthetic_setup(bool overlap) {
  SimSetup c;
  c.arch = toy_arch(2, 1);
  c.cluster = toy_cluster(4, 50e9, 1e-6);
  c.profile = toy_profile();
  c.ep = 4;
  c.workload.mode = sim::WorkloadMode::kSynthetic;
  c.workload.synthetic_layers = 3;
  c.workload.synthetic_compute = 50e-6;
  c.workload.synthetic_a2a_bytes = 1 << 20;
  c.workload.synthetic_overlap = overlap;
  c.options.warmup_steps = 1;
  c.options.steps = 4;
  return c;
}

}  // namespace moesim::testing
