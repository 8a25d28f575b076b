#include <algorithm>
#include <numeric>
#include <string>

#include "common/error.hpp"
#include "sim/engine/engine.hpp"

namespace moesim::sim {

namespace {

// A range is worth its own process from this many measured steps on (a process costs a fork, an
// engine, the platform and drawing the skipped steps: a few milliseconds against ~25 simulated
// steps), and a simulation is cut into at most this many ranges.
constexpr int kStepsPerRange = 25;
constexpr int kMaxRanges = 8;

}  // namespace

std::vector<StepRange> step_ranges(int warmup_steps, int steps) {
  warmup_steps = std::max(0, warmup_steps);
  steps = std::max(1, steps);
  const int n = std::clamp(steps / kStepsPerRange, 1, kMaxRanges);
  std::vector<StepRange> out;
  int begin = 0;
  for (int i = 0; i < n; ++i) {
    // Measured steps split as evenly as integers allow, the longer ranges first.
    const int measured = steps / n + (i < steps % n ? 1 : 0);
    const int end = (i == 0 ? warmup_steps : begin) + measured;
    out.push_back({begin, end});
    begin = end;
  }
  return out;
}

SimResult merge_step_ranges(const std::vector<SimResult>& parts) {
  if (parts.empty()) throw common::RunError("no step range to merge");
  if (parts.size() == 1) return parts.front();
  SimResult out = parts.front();
  const auto measured = [](const SimResult& r) { return static_cast<double>(r.step_latency.size()); };
  double total = measured(out);
  for (auto& l : out.layers) {
    l.token_tail *= total;
    l.token_avg *= total;
    l.a2a_tail *= total;
    l.a2a_avg *= total;
    l.span *= total;
    for (auto& t : l.rank_tokens) t *= total;
  }
  for (std::size_t p = 1; p < parts.size(); ++p) {
    const SimResult& r = parts[p];
    if (r.layers.size() != out.layers.size() || r.gpus.size() != out.gpus.size() || r.traffic.size() != out.traffic.size())
      throw common::RunError("step ranges of one simulation disagree on its layers or GPUs");
    // Each range's clock starts at zero: only the first one may hold the timeline's steps.
    if (!r.timeline.empty())
      throw common::RunError("the timeline's steps must lie in the first step range (range " + std::to_string(p) + " holds some)");
    const double n = measured(r);
    total += n;
    out.step_latency.insert(out.step_latency.end(), r.step_latency.begin(), r.step_latency.end());
    out.rebalances.insert(out.rebalances.end(), r.rebalances.begin(), r.rebalances.end());
    for (std::size_t l = 0; l < out.layers.size(); ++l) {
      auto& a = out.layers[l];
      const auto& b = r.layers[l];
      a.token_tail += b.token_tail * n;
      a.token_avg += b.token_avg * n;
      a.a2a_tail += b.a2a_tail * n;
      a.a2a_avg += b.a2a_avg * n;
      a.span += b.span * n;
      for (std::size_t i = 0; i < a.rank_tokens.size() && i < b.rank_tokens.size(); ++i) a.rank_tokens[i] += b.rank_tokens[i] * n;
    }
    for (std::size_t g = 0; g < out.gpus.size(); ++g) {
      auto& a = out.gpus[g];
      const auto& b = r.gpus[g];
      a.energy += b.energy;
      a.compute_busy += b.compute_busy;
      a.comm_busy += b.comm_busy;
      a.both_busy += b.both_busy;
      a.peak_power = std::max(a.peak_power, b.peak_power);
    }
    for (std::size_t s = 0; s < out.traffic.size(); ++s)
      for (std::size_t d = 0; d < out.traffic[s].size() && d < r.traffic[s].size(); ++d) out.traffic[s][d] += r.traffic[s][d];
    out.compute_actual += r.compute_actual;
    out.compute_alone += r.compute_alone;
    out.tokens += r.tokens;
    out.token_sends += r.token_sends;
    out.token_layers += r.token_layers;
    out.context_bytes = std::max(out.context_bytes, r.context_bytes);
    out.coherence_bytes += r.coherence_bytes;
    out.token_inter_node_bytes += r.token_inter_node_bytes;
    out.activities += r.activities;
    out.aggregated_flows += r.aggregated_flows;
    out.fluid_flows += r.fluid_flows;
    out.port_activities += r.port_activities;
    out.network_tolerance = std::max(out.network_tolerance, r.network_tolerance);
    out.trace_repeated = out.trace_repeated || r.trace_repeated;
    out.wall_seconds += r.wall_seconds;
  }
  for (auto& l : out.layers) {
    l.token_tail /= total;
    l.token_avg /= total;
    l.a2a_tail /= total;
    l.a2a_avg /= total;
    l.span /= total;
    for (auto& t : l.rank_tokens) t /= total;
  }
  // Summed in step order, as one simulation sums them.
  out.measured_time = std::accumulate(out.step_latency.begin(), out.step_latency.end(), 0.0);
  return out;
}

}  // namespace moesim::sim
