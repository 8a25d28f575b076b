// The LM head of an inference step computes logits only where a token is sampled: in prefill, once
// per prompt that ends in the step (its last token); in decode, for every sequence's token.
#include <doctest/doctest.h>

#include <map>

#include "models/costs.hpp"
#include "sim/engine/step_source.hpp"
#include "tests/sim/sim_fixtures.hpp"

using namespace moesim;
using moesim::testing::toy_arch;
using moesim::testing::toy_trace;

namespace {

// Two prompts of 40 tokens, two home ranks, 24 tokens a step: prompt 0 is split over steps 0 and 1,
// prompt 1 over steps 1 and 2.
traces::MemoryTrace two_prompts(const models::Architecture& a) {
  return toy_trace(a, 2, 40, [](int, int t) { return std::vector<int>{t % 8}; });
}

// Per step, per home rank: the prompts that end there.
std::vector<std::vector<long>> ending(const traces::MemoryTrace& trace, int steps) {
  auto reader = traces::read_memory_trace(trace);
  auto source = sim::make_prefill_source(*reader, 2, 24);
  std::vector<std::vector<long>> out;
  sim::StepBatch step;
  for (int s = 0; s < steps; ++s) {
    REQUIRE(source->next(step));
    std::vector<long> rows(2, 0);
    for (std::size_t r = 0; r < 2; ++r) {
      REQUIRE(step.logits[r].size() == step.attention[r].new_tokens.size());
      for (auto f : step.logits[r]) rows[r] += f;
    }
    out.push_back(rows);
  }
  return out;
}

// Two toy GPUs, one home rank each, replaying two_prompts; `steps` measured steps, all in the timeline.
testing::SimSetup two_gpus(sim::WorkloadMode mode, int steps) {
  testing::SimSetup c;
  c.arch = toy_arch(8, 1);
  c.cluster = testing::toy_cluster(2, 100e9, 1e-6);
  c.profile = testing::toy_profile();
  c.ep = 2;
  c.placement = testing::identity_placement(c.arch, c.ep);
  c.memory = two_prompts(c.arch);
  c.workload.mode = mode;
  c.options.steps = steps;
  c.options.timeline_steps = steps;
  c.options.layer_chunks = {1};
  c.options.contention = false;
  return c;
}

}  // namespace

TEST_CASE("prefill: a prompt's logits are computed once, in the step holding its last token") {
  const auto arch = toy_arch(8, 1);
  const auto trace = two_prompts(arch);
  // Step 0: prompt 0's first 24 tokens. Step 1: its last 16 (it ends, home 0) and prompt 1's first 8.
  // Step 2: prompt 1's next 24. Step 3: its last 8 (home 1) and the next reading's prompt 0 (home 0).
  const auto rows = ending(trace, 4);
  CHECK(rows[0] == std::vector<long>{0, 0});
  CHECK(rows[1] == std::vector<long>{1, 0});
  CHECK(rows[2] == std::vector<long>{0, 0});
  CHECK(rows[3] == std::vector<long>{0, 1});

  // The simulated LM head: one GEMM of those rows on the rank's GPU, none where no prompt ends; the
  // same whether the step runs as one batch or as two micro-batches (the rows are in the second
  // micro-batch when a prompt's entry is split).
  testing::SimSetup c = two_gpus(sim::WorkloadMode::kPrefill, 4);
  c.workload.tokens_per_step = 24;
  const double one = models::gemm_time(c.profile, arch.dtype, 1, arch.vocab_size, arch.hidden_size);
  for (int micro : {1, 2}) {
    CAPTURE(micro);
    sim::EngineOptions o = c.options;
    o.micro_batches = micro;
    const sim::SimResult r = testing::simulate_setup(c, o);
    std::map<std::pair<int, int>, double> head;  // (step, gpu) -> LM head time
    for (const auto& e : r.timeline)
      if (std::string(sim::timeline_category_name(e.category)) == "lm_head")
        head[{e.step, e.gpu}] += e.end - e.begin;
    for (int s = 0; s < 4; ++s)
      for (int gpu = 0; gpu < 2; ++gpu) {
        CAPTURE(s);
        CAPTURE(gpu);
        const long n = rows[static_cast<std::size_t>(s)][static_cast<std::size_t>(gpu)];
        CHECK(head[{s, gpu}] == doctest::Approx(static_cast<double>(n) * one).epsilon(1e-9));
      }
  }
}

TEST_CASE("decode: every sequence's token gets logits") {
  testing::SimSetup c = two_gpus(sim::WorkloadMode::kDecode, 2);
  c.workload.batch_sequences = 6;  // 3 a rank
  const sim::SimResult r = testing::simulate_setup(c, c.options);
  const double three = models::gemm_time(c.profile, c.arch.dtype, 3, c.arch.vocab_size, c.arch.hidden_size);
  int heads = 0;
  for (const auto& e : r.timeline)
    if (std::string(sim::timeline_category_name(e.category)) == "lm_head") {
      ++heads;
      CHECK(e.end - e.begin == doctest::Approx(three).epsilon(1e-9));
    }
  CHECK(heads == 4);  // 2 steps x 2 GPUs
}
