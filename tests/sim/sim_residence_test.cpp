// Residence dispatch (docs/simulator.md, "Residence dispatch"): tokens stay on the rank that ran
// their experts, hand-computed on two GPUs, and the token sends of the shipped trace counted here
// independently of the engine's routing.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "models/costs.hpp"
#include "tests/sim/sim_fixtures.hpp"
#include "traces/trace.hpp"

using namespace moesim;
using moesim::testing::identity_placement;
using moesim::testing::SimSetup;
using moesim::testing::simulate_setup;
using moesim::testing::toy_arch;
using moesim::testing::toy_cluster;
using moesim::testing::toy_profile;
using moesim::testing::toy_trace;

namespace {

// Two MoE layers of two experts, top-1, on two GPUs: expert e on GPU e.
SimSetup two_layer_case(sim::WorkloadMode mode) {
  SimSetup c;
  c.arch = toy_arch(2, 1);
  c.arch.num_layers = 2;
  c.arch.moe_layers = {0, 1};
  c.cluster = toy_cluster(2, 100e9, 1e-6);
  c.profile = toy_profile();
  c.ep = 2;
  c.placement = identity_placement(c.arch, 2);
  c.workload.mode = mode;
  c.workload.batch_sequences = 2;
  c.workload.decode_staggered = false;  // contexts equal the step: 0, then 1
  c.workload.tokens_per_step = 4;
  c.options.steps = 2;
  c.options.layer_chunks = {1, 1};
  return c;
}

}  // namespace

TEST_CASE("sim: residence: a token that stays sends nothing, one that moves sends once, and the context is gathered") {
  SimSetup c = two_layer_case(sim::WorkloadMode::kDecode);
  // Sequence 0 lives on GPU 0 and uses expert 0 in both layers: it never leaves. Sequence 1 lives on
  // GPU 1 and uses expert 0 in both layers: it moves to GPU 0 for layer 1 and stays there for layer 2.
  c.memory = toy_trace(c.arch, 2, 4, [](int, int) { return std::vector<int>{0, 0}; });
  c.options.dispatch = sim::DispatchMode::kFlat;
  const sim::SimResult flat = simulate_setup(c, c.options);
  c.options.dispatch = sim::DispatchMode::kResidence;
  const sim::SimResult res = simulate_setup(c, c.options);

  // 2 steps x 2 tokens x 2 MoE layers routed either way.
  CHECK(flat.token_layers == 8);
  CHECK(res.token_layers == 8);
  // Flat: sequence 1's token goes out and back in each layer: 4 sends per step.
  CHECK(flat.token_sends == 2 * 4);
  // Residence: one dispatch send per step (GPU 1 -> GPU 0 in layer 1), no combine (the owner ran the
  // expert), nothing in layer 2 (the expert is where the token already is).
  CHECK(res.token_sends == 2 * 1);
  // The dispatch moved one token's hidden state (1024 x 2 B) from GPU 1 to GPU 0; GPU 0 sent no
  // dispatch or combine, so all it sent is the coherence all-gather's share.
  CHECK(flat.coherence_bytes == 0.0);
  CHECK(flat.context_bytes == 0.0);
  // Coherence: at each step's end every token's KV cache of both layers (MHA: 2 x 8 heads x 128 x
  // 2 B = 4096 B per layer) and its sampled id (4 B) to every GPU: 2 tokens x (2 x 4096 + 4) per step.
  const double kv = 2.0 * 8 * 128 * 2;
  CHECK(models::kv_bytes_per_token_layer(c.arch, 1) == kv);
  CHECK(res.coherence_bytes == doctest::Approx(2 * 2 * (2 * kv + 4)));
  // Every GPU holds both sequences' context: positions 1 + 1 at step 0, 2 + 2 at step 1 (the largest),
  // each 2 layers x 4096 B.
  CHECK(res.context_bytes == doctest::Approx(4 * 2 * kv));
  // The flat run's traffic is its 4 sends per step of 2048 B, GPU 1 <-> GPU 0.
  CHECK(flat.traffic[1][0] == doctest::Approx(2 * 2 * 2048.0));
  CHECK(flat.traffic[0][1] == doctest::Approx(2 * 2 * 2048.0));
  // Residence: GPU 1 -> GPU 0 carries the dispatch and its share of the gathers; GPU 0 -> GPU 1 only
  // its share of the gathers (a ring of two: the same size each way).
  CHECK(res.traffic[1][0] - res.traffic[0][1] == doctest::Approx(2 * 2048.0));
}

TEST_CASE("sim: residence: prefill gathers the hidden states where a prompt's tokens are split") {
  SimSetup c = two_layer_case(sim::WorkloadMode::kPrefill);
  c.options.steps = 1;
  // One prompt of 4 tokens on GPU 0: tokens 0-1 use expert 0, tokens 2-3 expert 1 in layer 1, so the
  // prompt lives on both GPUs for layer 2, whose attention needs the whole prompt: one all-gather of
  // the 4 tokens' hidden states (4 x 1024 x 2 B) before it. Layer 1's keys and values (computed on
  // GPU 0 alone) and the sampled ids go at the step's end: 4 x (4096 + 4) B.
  c.memory = toy_trace(c.arch, 1, 4, [](int, int t) { return t < 2 ? std::vector<int>{0, 0} : std::vector<int>{1, 1}; });
  c.workload.tokens_per_step = 4;
  c.options.dispatch = sim::DispatchMode::kResidence;
  const sim::SimResult res = simulate_setup(c, c.options);
  CHECK(res.token_sends == 2);  // tokens 2 and 3 to GPU 1 in layer 1; layer 2 runs where they are
  CHECK(res.coherence_bytes == doctest::Approx(4 * 1024 * 2.0 + 4 * (2.0 * 8 * 128 * 2 + 4)));
}

TEST_CASE("sim: residence: a context that does not fit next to the weights is an input error naming the key") {
  SimSetup c = two_layer_case(sim::WorkloadMode::kDecode);
  c.memory = toy_trace(c.arch, 2, 4, [](int, int) { return std::vector<int>{0, 1}; });
  c.options.dispatch = sim::DispatchMode::kResidence;
  c.cluster.gpu_memory = 20e6;  // the toy's weights alone are about 32 MB per GPU
  const sim::SimResult r = [&] {
    try {
      return simulate_setup(c, c.options);
    } catch (const common::InputError& e) {
      const std::string what = e.what();
      CHECK(what.find("dispatch.mode residence") != std::string::npos);
      CHECK(what.find("workload.batch_sequences") != std::string::npos);
      CHECK(what.find("toy-cluster") != std::string::npos);
      return sim::SimResult{};
    }
  }();
  CHECK(r.step_latency.empty());
}

TEST_CASE("sim: residence: training is refused") {
  SimSetup c = two_layer_case(sim::WorkloadMode::kTraining);
  c.memory = toy_trace(c.arch, 2, 4, [](int, int) { return std::vector<int>{0, 1}; });
  c.options.dispatch = sim::DispatchMode::kResidence;
  CHECK_THROWS_WITH_AS(simulate_setup(c, c.options), doctest::Contains("dispatch.mode residence"), common::InputError);
}

// Independent of the engine's routing: walk the trace token by token with the residence rule
// written out again here, and compare with the token sends the engine counted for one prefill step
// holding the whole trace.
TEST_CASE("sim: residence: token sends on the shipped trace equal a count from the trace") {
  SimSetup c = moesim::testing::shipped_deepseek_setup(sim::WorkloadMode::kPrefill);
  auto reader = traces::open_trace(c.trace);
  const traces::TraceMeta meta = reader->meta();
  const int ep = c.ep, k = c.arch.top_k, L = static_cast<int>(c.arch.moe_layers.size());
  // A sequence is a run of tokens with one id; the n-th run lives on rank n mod EP.
  long tokens = 0, flat_sends = 0, residence_sends = 0, sequence = -1;
  std::uint32_t last_id = 0;
  traces::TokenBlock block;
  while (reader->next(block)) {
    for (std::size_t i = 0; i < block.size(); ++i) {
      if (sequence < 0 || block.sequence[i] != last_id) ++sequence;
      last_id = block.sequence[i];
      const int home = static_cast<int>(sequence % ep);
      int at = home;
      for (int l = 0; l < L; ++l) {
        std::vector<int> ranks;
        for (int j = 0; j < k; ++j) {
          const auto e = block.experts[(i * static_cast<std::size_t>(L) + static_cast<std::size_t>(l)) * k + j];
          ranks.push_back(c.placement.ranks[static_cast<std::size_t>(l)][e].front());
        }
        std::vector<int> distinct = ranks;
        std::sort(distinct.begin(), distinct.end());
        distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
        // Flat: out to each other rank and back home, every layer.
        for (int r : distinct) flat_sends += r != home ? 2 : 0;
        // Residence: out from where the token is, partial outputs to the rank holding most of its
        // experts (ties: the earliest in gate order), which it lives on next.
        int owner = ranks.front(), most = 0;
        for (int r : ranks) {
          const auto n = std::count(ranks.begin(), ranks.end(), r);
          if (n > most) {
            most = static_cast<int>(n);
            owner = r;
          }
        }
        for (int r : distinct) residence_sends += (r != at ? 1 : 0) + (r != owner ? 1 : 0);
        at = owner;
      }
      ++tokens;
    }
  }
  REQUIRE(tokens == static_cast<long>(meta.token_count));
  c.workload.tokens_per_step = tokens;  // every sequence in one step
  c.options.steps = 1;
  c.options.warmup_steps = 0;
  c.options.timeline_steps = 0;
  c.options.layer_chunks.assign(c.options.layer_chunks.size(), 1);
  c.options.dispatch = sim::DispatchMode::kFlat;
  const sim::SimResult flat = simulate_setup(c, c.options);
  c.options.dispatch = sim::DispatchMode::kResidence;
  const sim::SimResult res = simulate_setup(c, c.options);
  CHECK(flat.token_layers == static_cast<std::uint64_t>(tokens * L));
  CHECK(res.token_layers == static_cast<std::uint64_t>(tokens * L));
  CHECK(flat.token_sends == static_cast<std::uint64_t>(flat_sends));
  CHECK(res.token_sends == static_cast<std::uint64_t>(residence_sends));
  // Top-6 over 8 ranks: a token rarely finds its next experts where it is; residence saves the
  // sends of the ranks that are both its owner and among its next layer's (about 5%, arXiv:2401.08383).
  const auto pairs = static_cast<double>(tokens * L);
  MESSAGE("sends per token per MoE layer: flat " << static_cast<double>(flat_sends) / pairs << ", residence "
                                                 << static_cast<double>(residence_sends) / pairs);
  CHECK(res.token_sends < flat.token_sends);
}
