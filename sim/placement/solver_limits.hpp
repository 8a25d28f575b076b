// The MoETuner solver's limits and the report each of its stages returns (docs/placement.md).
// The work limits (branch-and-bound nodes per GLPK sub-problem, sweeps, search rounds) make results
// machine-independent; time_limit (s, 0 = none) is a wall-clock cap on top. Objectives and bounds are
// in the stage's own units (token assignments for stage 1, seconds for stage 2).
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace moesim::sim {

struct SolverLimits {
  int node_limit = 400;
  int sweeps = 6;
  int perturbations = 400;           // stage-2 iterated local search rounds (up to 16 ranks)
  long chain_entries = 8000000;      // stage-2 chain program (<= 5 ranks): entries over all layers, 12 bytes each
  long node_chain_states = 2000000;  // stage-2 two-node chain program: states over all cutoffs, about 60 bytes each
  int tie_break_sweeps = 20;         // stage-2 tie-break (stage2_tie_break): sweeps over the layers, 0 = off
  double time_limit = 0.0;
};

// A stage's outcome. status: "optimal" (objective equals the bound), "feasible" (every sub-problem
// finished, a gap remains), "limit_reached" (a work or time limit cut a sub-problem short).
struct StageReport {
  std::string status;
  double objective = 0.0;
  double bound = 0.0;  // valid lower bound on the whole stage problem
  double gap = 0.0;    // (objective - bound) / objective, 0 when both are 0
  double seconds = 0.0;
  int parts = 0;          // sub-problems (layers, layer pairs)
  int parts_optimal = 0;  // of which proven optimal
  int glpk_solves = 0;
  nlohmann::json to_json() const;
};

// Helpers the stages share for the clock and for comparing an objective with its bound.
namespace solver {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0);
Clock::time_point deadline(Clock::time_point t0, const SolverLimits& limits);
// Remaining wall-clock seconds for one of `parts_left` parts (0 = no time limit).
double part_time(const SolverLimits& limits, Clock::time_point deadline, int parts_left);
bool out_of_time(const SolverLimits& limits, Clock::time_point deadline);
// The objective meets the bound up to rounding.
bool close_to(double objective, double bound);
// (objective - bound) / objective, 0 when the objective is 0.
double relative_gap(double objective, double bound);

}  // namespace solver

}  // namespace moesim::sim
