#include "sim/placement/robust.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "sim/placement/evaluate.hpp"

namespace moesim::sim {

namespace {

struct Candidate {
  std::string solved_on;  // "mix", "no routing", or the trace's file
  int trace = -1;         // the trace it was solved on alone, else -1
  Placement placement;
  std::vector<double> scores;
  double worst = 0.0;
};

}  // namespace

RobustObjective parse_robust_objective(const std::string& text) {
  if (text == "expected") return RobustObjective::kExpected;
  if (text == "worst") return RobustObjective::kWorst;
  throw common::UsageError("--objective: expected expected (the weighted mix) or worst (minimax over candidates), "
                           "got " +
                           common::quoted(text) + common::did_you_mean(text, {"expected", "worst"}));
}

std::string robust_objective_name(RobustObjective objective) {
  return objective == RobustObjective::kWorst ? "worst" : "expected";
}

Placement place_robust(const PlacementPolicy& policy, const PlacementInput& input,
                       const std::vector<RobustTrace>& traces, RobustObjective objective) {
  if (traces.size() < 2)
    throw common::InputError("a robust placement needs two or more traces, got " + std::to_string(traces.size()));
  double weight_sum = 0.0;
  for (const RobustTrace& t : traces) {
    if (!std::isfinite(t.weight) || t.weight <= 0.0)
      throw common::InputError(t.path + ": expected a positive finite weight, got " + std::to_string(t.weight));
    weight_sum += t.weight;
  }

  // The candidates: the policy on the mix first (it wins ties), then, for `worst`, on each trace alone.
  std::vector<Candidate> candidates;
  PlacementInput in = input;
  if (!policy.needs_routing()) {
    in.routing = nullptr;
    candidates.push_back({"no routing", -1, policy.place(in), {}, 0.0});
  } else {
    std::vector<RoutingCounts> counts;
    std::vector<double> weights;
    for (const RobustTrace& t : traces) counts.push_back(t.counts), weights.push_back(t.weight);
    const RoutingCounts mix = mix_routing(counts, weights);
    in.routing = &mix;
    candidates.push_back({"mix", -1, policy.place(in), {}, 0.0});
    if (objective == RobustObjective::kWorst)
      for (std::size_t i = 0; i < traces.size(); ++i) {
        in.routing = &traces[i].counts;
        candidates.push_back({traces[i].path, static_cast<int>(i), policy.place(in), {}, 0.0});
      }
  }

  // Every candidate scored on every trace by the held-out evaluation.
  std::vector<std::uint64_t> tokens(traces.size(), 0);
  CheckedPlacement checked{"", {}, input.arch, input.cluster};
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    Candidate& cand = candidates[c];
    validate_placement(cand.placement, input.arch, "placement policy " + policy.name());
    checked.path = "candidate " + std::to_string(c);
    checked.placement = cand.placement;
    for (std::size_t i = 0; i < traces.size(); ++i) {
      const PlacementEvaluation e = evaluate_placement(checked, traces[i].path);
      cand.scores.push_back(e.mean_max_over_mean);
      tokens[i] = e.tokens;
    }
    cand.worst = *std::max_element(cand.scores.begin(), cand.scores.end());
  }
  std::size_t chosen = 0;
  for (std::size_t c = 1; c < candidates.size(); ++c)
    if (candidates[c].worst < candidates[chosen].worst) chosen = c;

  nlohmann::json traces_j = nlohmann::json::array();
  for (std::size_t i = 0; i < traces.size(); ++i)
    traces_j.push_back({{"file", traces[i].path},
                        {"sha256", traces[i].sha256},
                        {"tokens", tokens[i]},
                        {"weight", traces[i].weight / weight_sum}});
  nlohmann::json candidates_j = nlohmann::json::array();
  for (const Candidate& c : candidates) {
    nlohmann::json j = {{"solved_on", c.solved_on}, {"scores", c.scores}, {"worst", c.worst}};
    if (c.trace >= 0) j["trace"] = c.trace;
    candidates_j.push_back(j);
  }
  nlohmann::json robust = {{"objective", robust_objective_name(objective)},
                           {"score", "max/mean rank load, mean over MoE layers (place evaluate)"},
                           {"traces", traces_j},
                           {"candidates", candidates_j},
                           {"chosen", chosen}};
  if (!policy.needs_routing())
    robust["note"] = "policy " + policy.name() + " reads no routing: nothing to combine, one placement scored";
  else if (objective == RobustObjective::kWorst)
    robust["note"] = "minimax over the candidates (the policy on the mix and on each trace alone), not an exact "
                     "minimax solve";

  Placement placement = std::move(candidates[chosen].placement);
  placement.trace_sha256.clear();
  placement.report["robust"] = robust;
  return placement;
}

}  // namespace moesim::sim
