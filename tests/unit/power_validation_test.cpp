// Power by kernel class (models::kernel_power) against published inference power it was not fitted
// to: Llama-2-70B served on A100-80GB GPUs at TP 2, 4 and 8 (Splitwise's measurements, shipped in
// models/reference/splitwise/data/perf_model.csv). The a100-sxm profile's power figures come from
// the zeus training data and the datasheet; nothing here was tuned to these rows.
//
// Each measured run is a 512..4096-token prompt then 128 output tokens per sequence. The model costs
// every kernel of it on one GPU of the TP group from the profile (attention with its KV cache, the
// SwiGLU FFN, the LM head, two all-reduces per layer), draws each kernel's power by its class, and
// fills the rest of the measured wall time (prompt time + 128 x time per token) with idle power: the
// serving stack's gaps are measured, not modelled, so this checks power, not time. The table it
// prints is docs/validation.md's.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "models/architecture.hpp"
#include "models/costs.hpp"
#include "models/profile.hpp"
#include "tests/support/test_support.hpp"

namespace {

using namespace moesim::models;

struct Energy {
  double busy = 0.0;    // s of kernels (compute or communication)
  double joules = 0.0;  // J they draw
};

void add_kernel(Energy& e, const Profile& p, Dtype dtype, const ExpertWork& w) {
  e.busy += w.time;
  e.joules += w.time * kernel_power(p, dtype, compute_class(p, dtype, w.flops, w.bytes));
}

// One forward pass of `batch` sequences, `new_tokens` each after `context` cached positions.
void add_pass(Energy& e, const Profile& p, const Architecture& a, int tp, long batch, long new_tokens, long context) {
  AttentionBatch ab;
  ab.new_tokens.assign(static_cast<std::size_t>(batch), new_tokens);
  ab.context.assign(static_cast<std::size_t>(batch), context);
  const long tokens = batch * new_tokens;
  const ExpertWork attn = attention_time(p, a, ab, tp);
  const ExpertWork ffn = dense_ffn_time(p, a, tokens, a.dense_ffn_size, tp);
  const double ar = collective_time(p, CollectiveOp::kAllReduce, tp, static_cast<double>(tokens) * a.hidden_size * 2.0,
                                    300e9, 0.0);
  for (int l = 0; l < a.num_layers; ++l) {
    add_kernel(e, p, a.dtype, attn);
    add_kernel(e, p, a.dtype, ffn);
    e.busy += 2 * ar;
    e.joules += 2 * ar * state_power(p, GpuState::kComm, a.dtype, 0.0);
  }
  // The LM head on the last position of each sequence.
  const double m = static_cast<double>(batch), n = a.vocab_size / tp, k = a.hidden_size;
  add_kernel(e, p, a.dtype, ExpertWork{gemm_time(p, a.dtype, m, n, k), gemm_flops(m, n, k), gemm_bytes(a.dtype, m, n, k)});
}

struct Run {
  int tp = 0;
  long prompt = 0, batch = 0, out = 0;
  double prompt_ms = 0.0, token_ms = 0.0, avg_fraction = 0.0;
  int samples = 0;
};

// The rows with power, averaged over repeats (the file repeats each configuration).
std::vector<Run> splitwise_a100_llama70b() {
  const auto path = moesim::testing::source_dir() / "models/reference/splitwise/data/perf_model.csv";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read ", path.string());
  std::string line;
  std::getline(in, line);
  REQUIRE(line == "model,hardware,prompt_size,batch_size,token_size,peak_power,average_power,prompt_time,token_time,"
                  "e2e_time,tensor_parallel");
  std::map<std::tuple<int, long, long, long>, Run> runs;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    REQUIRE(f.size() == 11);
    if (f[0] != "llama2-70b" || f[1] != "a100-80gb") continue;
    const double avg = std::stod(f[6]);
    if (!(avg > 0.0)) continue;  // no power recorded for this row
    const int tp = std::stoi(f[10]);
    const long prompt = std::stol(f[2]), batch = std::stol(f[3]), out = std::stol(f[4]);
    Run& r = runs[{tp, prompt, batch, out}];
    r.tp = tp, r.prompt = prompt, r.batch = batch, r.out = out;
    r.prompt_ms += std::stod(f[7]), r.token_ms += std::stod(f[8]), r.avg_fraction += avg;
    ++r.samples;
  }
  std::vector<Run> out;
  for (auto& [key, r] : runs) {
    r.prompt_ms /= r.samples, r.token_ms /= r.samples, r.avg_fraction /= r.samples;
    out.push_back(r);
  }
  return out;
}

}  // namespace

TEST_CASE("power by kernel class: Llama-2-70B inference on A100 against Splitwise's measured average power") {
  const Profile p = load_profile("a100-sxm");
  const Architecture a = load_architecture("llama2-70b");
  const std::vector<Run> runs = splitwise_a100_llama70b();
  REQUIRE(runs.size() == 33);
  const double tdp = p.power.max_power;
  REQUIRE(tdp == doctest::Approx(400.0));
  std::map<int, std::vector<double>> predicted_by_tp, measured_by_tp;
  double worst = 0.0, sum = 0.0;
  int used = 0;
  std::printf("%3s %6s %5s %9s %9s %9s %9s %8s\n", "tp", "prompt", "batch", "tok ms", "busy ms", "measured",
              "model", "error");
  for (const Run& r : runs) {
    Energy e;
    add_pass(e, p, a, r.tp, r.batch, r.prompt, 0);
    const double prompt_busy = e.busy;
    for (long i = 0; i < r.out; ++i) add_pass(e, p, a, r.tp, r.batch, 1, r.prompt + i);
    const double token_busy = (e.busy - prompt_busy) / static_cast<double>(r.out);
    const double wall = (r.prompt_ms + static_cast<double>(r.out) * r.token_ms) * 1e-3;
    // The kernels fit in the measured time (the serving stack adds gaps, never removes work).
    CHECK(e.busy < wall);
    const double idle = std::max(0.0, wall - e.busy);
    const double predicted = (e.joules + idle * p.power.idle) / wall / tdp;
    const double err = predicted / r.avg_fraction - 1.0;
    // The 8192-token prompts record an average of 0.17-0.18 TDP under a peak of 0.95-1.01 with a
    // third of the run in the prompt: below what the prompt alone must average, so not a whole-run
    // average; reported, not counted.
    const bool counted = r.prompt < 8192;
    std::printf("%3d %6ld %5ld %9.2f %9.2f %9.3f %9.3f %+7.1f%%%s\n", r.tp, r.prompt, r.batch, r.token_ms,
                token_busy * 1e3, r.avg_fraction, predicted, 100 * err, counted ? "" : "  (not counted)");
    if (!counted) continue;
    predicted_by_tp[r.tp].push_back(predicted);
    measured_by_tp[r.tp].push_back(r.avg_fraction);
    worst = std::max(worst, std::fabs(err));
    sum += std::fabs(err);
    ++used;
  }
  std::printf("mean |error| %.1f%%, worst %.1f%% over %d runs\n", 100 * sum / used, 100 * worst, used);
  REQUIRE(used == 30);
  // The mechanism: wider TP leaves each GPU less to stream per token in about the same wall time, so
  // it draws less, as measured (0.74 / 0.60 / 0.43 TDP at TP 2 / 4 / 8).
  auto mean = [](const std::vector<double>& v) {
    double s = 0.0;
    for (double x : v) s += x;
    return s / static_cast<double>(v.size());
  };
  CHECK(mean(predicted_by_tp[2]) > mean(predicted_by_tp[4]));
  CHECK(mean(predicted_by_tp[4]) > mean(predicted_by_tp[8]));
  CHECK(mean(measured_by_tp[2]) > mean(measured_by_tp[4]));
  // Measured here: mean 7.7%, worst 20.9% (batch 16, where the model leaves more of the step idle
  // than the GPU is). A memory-bound kernel drawing in proportion to the HBM bandwidth it streams
  // (idle + (compute - idle) x bandwidth share) gave 14.9% / 31.5% on these rows and was not adopted.
  CHECK(sum / used < 0.10);
  CHECK(worst < 0.25);
}
