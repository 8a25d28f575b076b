// `moesim-calibrate validate`: a real MoE expert layer (grouped GEMMs sized by a trace's tokens per
// expert) measured alone, with concurrent communication traffic, and as two micro-batches (two-batch
// overlap: one half's experts while the other half's dispatch or combine moves), against the
// simulator's cost models (models::grouped_expert_time, models::contention, the traffic's time)
// applied to a profile. Times in seconds, traffic in bytes. Errors are (predicted - measured) /
// measured; the goal is a median |error| <= 5% and a worst <= 10%.
#pragma once

#include <array>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calibrate/device.hpp"
#include "models/architecture.hpp"
#include "models/profile.hpp"
#include "traces/trace.hpp"

namespace moesim::calibrate {

enum class CaseKind { kAlone, kTraffic, kTwoMicroBatches };
const char* case_kind_name(CaseKind kind);  // "alone", "traffic", "two micro-batches"

// One half of a window run as two micro-batches: its tokens and their tokens per expert.
struct MicroBatch {
  long tokens = 0;
  std::vector<long> tokens_per_expert;
};

struct ValidationCase {
  std::string label;  // "layer 3, 1000 tokens"
  int layer = 0;      // index into the trace's MoE layers
  std::vector<long> tokens_per_expert;  // the whole window
  CaseKind kind = CaseKind::kAlone;
  // kTwoMicroBatches: A = the window's first ceil(n/2) tokens, B = the rest (the simulator's split).
  std::array<MicroBatch, 2> halves;
};

// Tokens per expert over windows of `batch` consecutive tokens for each listed MoE layer (indices
// into the trace's layers); per window one case alone, one with traffic and (windows of 2 tokens or
// more) one as two micro-batches. Batch sizes that are not powers of two give token counts off the
// profile's grid.
std::vector<ValidationCase> validation_cases(traces::TraceReader& trace, const std::vector<int>& layers,
                                             const std::vector<long>& batches);

// The grouped GEMMs one GPU issues for those tokens: per projection one group over the experts with
// tokens (SwiGLU: gate and up [t x hidden] x [hidden x ffn/tp], down [t x ffn/tp] x [ffn/tp x hidden]).
GemmWork expert_layer_work(const models::Architecture& arch, const std::vector<long>& tokens_per_expert, int tp,
                           models::Dtype dtype);

// The traffic's time alone (s) from the profile, as the simulator costs it: an NCCL collective by
// models::collective_time (the profile's curve; InputError when it has none); a copy kernel pays a
// kernel's launch floor (the bf16 GEMM table's launch_floor) and moves its bytes at the profile's
// HBM rate, read and written: floor + 2 x bytes / device.hbm_bandwidth. Copy-engine traffic is not
// predicted (UsageError).
double predict_traffic_time(const models::Profile& profile, const Traffic& traffic);

// The two phases of a window run as two micro-batches: phase 1 runs A's expert GEMMs while B's
// dispatch moves, phase 2 B's expert GEMMs while A's combine moves. Each traffic is `traffic` (its
// kind, CTAs, op) carrying that half's tokens x hidden / tp elements of models::dispatch_element_bytes
// (phase 1) or models::combine_element_bytes (phase 2) of the architecture's dtype.
struct Phase {
  std::string what;  // "A's experts + B's dispatch"
  std::vector<long> tokens_per_expert;  // whose GEMMs run
  Traffic traffic;
};
std::array<Phase, 2> two_batch_phases(const models::Architecture& arch, const ValidationCase& c, int tp,
                                      const Traffic& traffic);

// The simulator's sharing rule (sim/engine/executor.cpp): GEMMs of `gemm` s alone and traffic of
// `comm` s alone started together each advance at 1/slowdown while both run and at full speed once
// the other is done. With g = gemm x compute_slowdown and c = comm x comm_slowdown: if g <= c the
// GEMMs end at g and the traffic at g + comm - g / comm_slowdown, else the traffic ends at c and the
// GEMMs at c + gemm - c / compute_slowdown. The span (the later end) is at most max(g, c).
struct PhasePrediction {
  double gemm = 0.0, comm = 0.0;  // s, each alone
  double compute_slowdown = 1.0, comm_slowdown = 1.0;
  double gemm_end = 0.0, comm_end = 0.0;  // s from the common start
  double span() const { return gemm_end > comm_end ? gemm_end : comm_end; }
  double sequential() const { return gemm + comm; }
};
PhasePrediction concurrent_prediction(double gemm, double comm, double compute_slowdown, double comm_slowdown);
// A phase from the profile: gemm = grouped_expert_time, comm = predict_traffic_time, the slowdowns
// models::contention(profile, comm_op, traffic bytes, GEMM FLOP).
PhasePrediction predict_phase(const models::Profile& profile, const models::Architecture& arch,
                              const std::vector<long>& tokens_per_expert, int tp, models::CollectiveOp comm_op,
                              const Traffic& traffic);

// Predicted time (s) of a case: alone, grouped_expert_time; with traffic, times the contention
// table's compute slowdown for `comm_op` at `traffic.bytes`; as two micro-batches, the sum of the two
// phases' spans (predict_phase on two_batch_phases).
double predict_case(const models::Profile& profile, const models::Architecture& arch, const ValidationCase& c, int tp,
                    models::CollectiveOp comm_op, const Traffic& traffic);

// One measured and predicted phase of a two-micro-batch case (medians over the samples).
struct PhaseRow {
  Phase phase;
  double span = 0.0, gemm = 0.0, comm = 0.0;  // s, concurrent: from the common start
  double gemm_alone = 0.0, comm_alone = 0.0, sequential = 0.0;  // s, back to back
  PhasePrediction predicted;
};

struct ValidationRow {
  ValidationCase c;
  double flops = 0.0;
  double measured = 0.0;  // s, median
  double predicted = 0.0;
  double p10 = 0.0, p90 = 0.0;
  double overlap = 1.0;  // fraction, cases with traffic
  // Two micro-batches: the phases; sequential = each phase's GEMMs then its traffic, summed.
  std::vector<PhaseRow> phases;
  double measured_sequential = 0.0, predicted_sequential = 0.0;
  double error() const { return measured > 0 ? (predicted - measured) / measured : 0.0; }
  double sequential_error() const {
    return measured_sequential > 0 ? (predicted_sequential - measured_sequential) / measured_sequential : 0.0;
  }
  // What overlapping saves: 1 - span / sequential.
  double measured_gain() const { return measured_sequential > 0 ? 1.0 - measured / measured_sequential : 0.0; }
  double predicted_gain() const { return predicted_sequential > 0 ? 1.0 - predicted / predicted_sequential : 0.0; }
};
struct ValidationResult {
  std::vector<ValidationRow> rows;
  double median_abs_error = 0.0;
  double max_abs_error = 0.0;
  bool passed() const { return median_abs_error <= 0.05 && max_abs_error <= 0.10; }
};
ValidationResult summarize_validation(std::vector<ValidationRow> rows);

// Measures every case on `device` (alone: the GEMMs only; with traffic: while `traffic` runs
// throughout on another stream; two micro-batches: each phase by Device::time_concurrent, its
// traffic `traffic` resized as two_batch_phases says) and predicts it; prints the table to `out` as
// rows complete.
ValidationResult run_validation(Device& device, const models::Profile& profile, const models::Architecture& arch,
                                const std::vector<ValidationCase>& cases, int tp, const Traffic& traffic,
                                const Timing& timing, std::ostream& out);
void print_validation_header(std::ostream& out);
void print_validation_row(std::ostream& out, const ValidationRow& row);
void print_validation_summary(std::ostream& out, const ValidationResult& r);
nlohmann::json validation_to_json(const ValidationResult& r, const DeviceInfo& device, const std::string& profile,
                                  const std::string& trace);

}  // namespace moesim::calibrate
