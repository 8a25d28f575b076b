#include "sim/placement/solver_limits.hpp"

#include <algorithm>
#include <cmath>

namespace moesim::sim {

nlohmann::json StageReport::to_json() const {
  return {{"status", status},
          {"objective", objective},
          {"bound", bound},
          {"gap", gap},
          {"seconds", seconds},
          {"parts", parts},
          {"parts_optimal", parts_optimal},
          {"glpk_solves", glpk_solves}};
}

namespace solver {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Clock::time_point deadline(Clock::time_point t0, const SolverLimits& limits) {
  return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits.time_limit));
}

double part_time(const SolverLimits& limits, Clock::time_point deadline, int parts_left) {
  if (limits.time_limit <= 0) return 0.0;
  const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
  return std::max(0.001, left / std::max(1, parts_left));
}

bool out_of_time(const SolverLimits& limits, Clock::time_point deadline) {
  return limits.time_limit > 0 && Clock::now() >= deadline;
}

bool close_to(double objective, double bound) {
  return objective <= bound + 1e-9 * std::max(1.0, std::fabs(objective)) + 1e-300;
}

double relative_gap(double objective, double bound) {
  if (objective <= 0.0) return 0.0;
  return std::max(0.0, (objective - bound) / objective);
}

}  // namespace solver

}  // namespace moesim::sim
