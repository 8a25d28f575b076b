// `moesim-calibrate validate`: a real MoE expert layer (grouped GEMMs sized by a trace's tokens per
// expert) measured alone and with concurrent communication traffic, against the simulator's cost
// models (models::grouped_expert_time, models::contention) applied to a profile. Errors are
// (predicted - measured) / measured; the goal is a median |error| <= 5% and a worst <= 10%.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calibrate/device.hpp"
#include "models/architecture.hpp"
#include "models/profile.hpp"
#include "traces/trace.hpp"

namespace moesim::calibrate {

struct ValidationCase {
  std::string label;  // "layer 3, tokens 0..996"
  int layer = 0;      // index into the trace's MoE layers
  std::vector<long> tokens_per_expert;
  bool with_traffic = false;
};

// Tokens per expert over windows of `batch` consecutive tokens for each listed MoE layer (indices
// into the trace's layers); one case alone and one with traffic per window. Batch sizes that are not
// powers of two give token counts off the profile's grid.
std::vector<ValidationCase> validation_cases(traces::TraceReader& trace, const std::vector<int>& layers,
                                             const std::vector<long>& batches);

// The grouped GEMMs one GPU issues for those tokens: per projection one group over the experts with
// tokens (SwiGLU: gate and up [t x hidden] x [hidden x ffn/tp], down [t x ffn/tp] x [ffn/tp x hidden]).
GemmWork expert_layer_work(const models::Architecture& arch, const std::vector<long>& tokens_per_expert, int tp,
                           models::Dtype dtype);

// Predicted time (s) of a case: grouped_expert_time, times the contention table's compute slowdown
// for `comm_op` at `traffic_bytes` when the case runs with traffic.
double predict_case(const models::Profile& profile, const models::Architecture& arch, const ValidationCase& c, int tp,
                    models::CollectiveOp comm_op, double traffic_bytes);

struct ValidationRow {
  ValidationCase c;
  double flops = 0.0;
  double measured = 0.0;  // s, median
  double predicted = 0.0;
  double p10 = 0.0, p90 = 0.0;
  double overlap = 1.0;  // fraction, cases with traffic
  double error() const { return measured > 0 ? (predicted - measured) / measured : 0.0; }
};
struct ValidationResult {
  std::vector<ValidationRow> rows;
  double median_abs_error = 0.0;
  double max_abs_error = 0.0;
  bool passed() const { return median_abs_error <= 0.05 && max_abs_error <= 0.10; }
};
ValidationResult summarize_validation(std::vector<ValidationRow> rows);

// Measures every case on `device` (alone: the GEMMs only; with traffic: while `traffic` runs
// throughout on another stream) and predicts it; prints the table to `out` as rows complete.
ValidationResult run_validation(Device& device, const models::Profile& profile, const models::Architecture& arch,
                                const std::vector<ValidationCase>& cases, int tp, const Traffic& traffic,
                                const Timing& timing, std::ostream& out);
void print_validation_header(std::ostream& out);
void print_validation_row(std::ostream& out, const ValidationRow& row);
void print_validation_summary(std::ostream& out, const ValidationResult& r);
nlohmann::json validation_to_json(const ValidationResult& r, const DeviceInfo& device, const std::string& profile,
                                  const std::string& trace);

}  // namespace moesim::calibrate
