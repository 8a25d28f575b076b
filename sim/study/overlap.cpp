#include "sim/study/overlap.hpp"

#include <algorithm>
#include <limits>

#include "common/error.hpp"

namespace moesim::sim {

namespace {

// Steps `auto` simulates per candidate: enough to see the routing vary, few enough to stay cheap.
constexpr int kAutoSteps = 4;

}  // namespace

std::vector<TimelinePlan> plan_timelines(const Scenario& s, int layers, const std::vector<int>& requested) {
  const int n = std::max(1, s.overlap.chunks);
  const std::vector<int> one(static_cast<std::size_t>(layers), 1), many(static_cast<std::size_t>(layers), n);
  const OverlapPolicy req = s.overlap.policy;
  std::vector<TimelinePlan> plans{
      {overlap_policy_name(req), requested, req != OverlapPolicy::kIdeal, req == OverlapPolicy::kTbo ? 2 : 1}};
  if (s.overlap.timelines != Timelines::kAll) return plans;
  if (req != OverlapPolicy::kSequential) plans.push_back({"sequential", one, true});
  if (req != OverlapPolicy::kOverlapped) plans.push_back({"overlapped", many, true});
  if (req != OverlapPolicy::kIdeal) plans.push_back({"ideal", many, false});
  plans.push_back({"ideal-1-chunk", one, false});
  return plans;
}

std::vector<int> choose_auto_chunks(const Scenario& s, int layers, const std::vector<int>& moe_layers,
                                    const SimulatePlans& simulate, nlohmann::json& decisions) {
  if (s.workload.mode == WorkloadMode::kSynthetic || s.workload.mode == WorkloadMode::kTraining)
    throw common::InputError("overlap.policy auto chooses per MoE layer for prefill and decode; use sequential, "
                             "overlapped or ideal for " + workload_mode_name(s.workload.mode));
  std::vector<TimelinePlan> candidates;
  for (int n : kAutoCandidates)
    candidates.push_back({"auto-candidate-" + std::to_string(n), std::vector<int>(static_cast<std::size_t>(layers), n), true});
  const std::vector<SimResult> results = simulate(candidates, std::min(kAutoSteps, s.workload.steps));
  std::vector<int> chunks(static_cast<std::size_t>(layers), 1);
  for (int d : moe_layers) {
    nlohmann::json spans = nlohmann::json::object();
    double best = std::numeric_limits<double>::infinity();
    int best_n = 1;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const auto& lr = results[i].layers[static_cast<std::size_t>(d)];
      const int n = kAutoCandidates[i];
      spans[std::to_string(n)] = lr.span;
      if (lr.span < best * (1.0 - 1e-9)) {
        best = lr.span;
        best_n = n;
      }
    }
    chunks[static_cast<std::size_t>(d)] = best_n;
    decisions.push_back({{"layer", d},
                         {"chosen", best_n == 1 ? "sequential" : "overlapped-" + std::to_string(best_n)},
                         {"simulated_span_s", spans},
                         {"why", best_n == 1 ? "simulated, the chunked schedules end this layer later: contention and "
                                               "per-chunk costs outweigh the hidden communication"
                                             : "simulated, this chunk count ends the layer soonest: the hidden "
                                               "all-to-all outweighs contention and per-chunk costs"}});
  }
  return chunks;
}

}  // namespace moesim::sim
