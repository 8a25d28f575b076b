#include "calibrate/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "calibrate/measurements.hpp"
#include "calibrate/stats.hpp"
#include "common/error.hpp"
#include "common/stats.hpp"
#include "models/costs.hpp"

namespace moesim::calibrate {

const char* case_kind_name(CaseKind kind) {
  switch (kind) {
    case CaseKind::kAlone:
      return "alone";
    case CaseKind::kTraffic:
      return "traffic";
    case CaseKind::kTwoMicroBatches:
      return "two micro-batches";
  }
  return "?";
}

std::vector<ValidationCase> validation_cases(traces::TraceReader& trace, const std::vector<int>& layers,
                                             const std::vector<long>& batches) {
  const traces::TraceMeta& meta = trace.meta();
  const int nl = static_cast<int>(meta.shape.layers.size());
  const int topk = meta.shape.top_k;
  for (int l : layers)
    if (l < 0 || l >= nl)
      throw common::UsageError("--layers: MoE layer index " + std::to_string(l) + " is outside the trace's 0.." +
                               std::to_string(nl - 1));
  std::vector<ValidationCase> cases;
  for (long batch : batches) {
    if (batch < 1) throw common::UsageError("--batches: expected positive token counts, got " + std::to_string(batch));
    trace.rewind();
    // Per layer, the tokens per expert of the window's two halves (A: the first ceil(batch/2) tokens).
    const long first = (batch + 1) / 2;
    std::vector<std::array<std::vector<long>, 2>> counts(layers.size());
    for (auto& c : counts) c.fill(std::vector<long>(meta.shape.num_experts, 0));
    long taken = 0;
    traces::TokenBlock block;
    while (taken < batch && trace.next(block, static_cast<std::size_t>(batch - taken))) {
      for (std::size_t t = 0; t < block.size(); ++t) {
        const std::size_t half = taken + static_cast<long>(t) < first ? 0 : 1;
        for (std::size_t li = 0; li < layers.size(); ++li)
          for (int k = 0; k < topk; ++k) ++counts[li][half][block.experts[(t * nl + layers[li]) * topk + k]];
      }
      taken += static_cast<long>(block.size());
    }
    if (taken < batch)
      throw common::UsageError("--batches: the trace has " + std::to_string(taken) + " tokens, fewer than " +
                               std::to_string(batch));
    for (std::size_t li = 0; li < layers.size(); ++li) {
      ValidationCase c;
      c.label = "layer " + std::to_string(layers[li]) + ", " + std::to_string(batch) + " tokens";
      c.layer = layers[li];
      c.tokens_per_expert = counts[li][0];
      for (std::size_t e = 0; e < c.tokens_per_expert.size(); ++e) c.tokens_per_expert[e] += counts[li][1][e];
      c.halves = {MicroBatch{first, counts[li][0]}, MicroBatch{batch - first, counts[li][1]}};
      for (CaseKind kind : {CaseKind::kAlone, CaseKind::kTraffic, CaseKind::kTwoMicroBatches}) {
        if (kind == CaseKind::kTwoMicroBatches && batch < 2) continue;  // a one-token window has no second half
        c.kind = kind;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

GemmWork expert_layer_work(const models::Architecture& a, const std::vector<long>& tokens, int tp,
                           models::Dtype dtype) {
  const long ffn = (a.expert_ffn_size + tp - 1) / tp;
  const long hidden = a.hidden_size;
  GemmWork w;
  auto group = [&](long n, long k) {
    for (long t : tokens)
      if (t > 0) w.push_back({dtype, t, n, k});
  };
  group(ffn, hidden);                           // gate (SwiGLU) or up (GELU)
  if (a.ffn_projections == 3) group(ffn, hidden);  // up
  group(hidden, ffn);                           // down
  return w;
}

double predict_traffic_time(const models::Profile& profile, const Traffic& traffic) {
  if (traffic.kind == "copy_kernel") {
    if (!(profile.device.hbm_bandwidth > 0.0))
      throw common::InputError("profile " + profile.name +
                               " gives no device.hbm_bandwidth: the copy traffic's time cannot be predicted");
    // A kernel's fixed cost is the launch floor the profile measured (its 16-bit GEMM table's); the
    // bytes move at the rate the full-grid copy kernel measured (read and written).
    const models::GemmTable* table = profile.gemm_table(models::Dtype::kBf16);
    return (table ? table->launch_floor : 0.0) + 2.0 * traffic.bytes / profile.device.hbm_bandwidth;
  }
  if (traffic.kind == "nccl") {
    const models::CollectiveOp op = traffic.op.value_or(models::CollectiveOp::kAllToAll);
    try {
      return models::collective_time(profile, op, traffic.ranks, traffic.bytes, 0.0, 0.0);
    } catch (const std::invalid_argument&) {
      throw common::InputError("profile " + profile.name + " has no " + models::collective_op_name(op) +
                               " curve: the NCCL traffic's time cannot be predicted");
    }
  }
  throw common::UsageError("the time of " + traffic.kind +
                           " traffic is not predicted from a profile (use a copy kernel or NCCL traffic)");
}

std::array<Phase, 2> two_batch_phases(const models::Architecture& arch, const ValidationCase& c, int tp,
                                      const Traffic& traffic) {
  auto bytes = [&](const MicroBatch& mb, double element_bytes) {
    return static_cast<double>(mb.tokens) * static_cast<double>(arch.hidden_size) * element_bytes / tp;
  };
  Traffic dispatch = traffic, combine = traffic;
  dispatch.bytes = bytes(c.halves[1], models::dispatch_element_bytes(arch.dtype));
  combine.bytes = bytes(c.halves[0], models::combine_element_bytes(arch.dtype));
  return {Phase{"A's experts + B's dispatch", c.halves[0].tokens_per_expert, dispatch},
          Phase{"B's experts + A's combine", c.halves[1].tokens_per_expert, combine}};
}

PhasePrediction concurrent_prediction(double gemm, double comm, double compute_slowdown, double comm_slowdown) {
  PhasePrediction p{gemm, comm, compute_slowdown, comm_slowdown, 0.0, 0.0};
  const double g = gemm * compute_slowdown, c = comm * comm_slowdown;
  if (g <= c) {
    p.gemm_end = g;
    p.comm_end = g + comm - g / comm_slowdown;
  } else {
    p.comm_end = c;
    p.gemm_end = c + gemm - c / compute_slowdown;
  }
  return p;
}

PhasePrediction predict_phase(const models::Profile& profile, const models::Architecture& arch,
                              const std::vector<long>& tokens_per_expert, int tp, models::CollectiveOp comm_op,
                              const Traffic& traffic) {
  const models::ExpertWork w = models::grouped_expert_time(profile, arch, tokens_per_expert, tp);
  const double comm = predict_traffic_time(profile, traffic);
  const models::Slowdown s = models::contention(profile, comm_op, traffic.bytes, w.flops);
  return concurrent_prediction(w.time, comm, s.compute, s.comm);
}

double predict_case(const models::Profile& profile, const models::Architecture& arch, const ValidationCase& c, int tp,
                    models::CollectiveOp comm_op, const Traffic& traffic) {
  if (c.kind == CaseKind::kTwoMicroBatches) {
    double span = 0.0;
    for (const Phase& p : two_batch_phases(arch, c, tp, traffic))
      span += predict_phase(profile, arch, p.tokens_per_expert, tp, comm_op, p.traffic).span();
    return span;
  }
  const models::ExpertWork w = models::grouped_expert_time(profile, arch, c.tokens_per_expert, tp);
  if (c.kind == CaseKind::kAlone) return w.time;
  return w.time * models::contention(profile, comm_op, traffic.bytes, w.flops).compute;
}

ValidationResult summarize_validation(std::vector<ValidationRow> rows) {
  ValidationResult r;
  r.rows = std::move(rows);
  std::vector<double> errs;
  for (const ValidationRow& row : r.rows) errs.push_back(std::abs(row.error()));
  if (!errs.empty()) {
    r.median_abs_error = common::percentile(errs, 0.5);
    r.max_abs_error = *std::max_element(errs.begin(), errs.end());
  }
  return r;
}

void print_validation_header(std::ostream& out) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "# %-26s %-17s %7s %9s %12s %12s %8s %8s\n", "case", "kind", "experts", "GFLOP",
                "measured", "predicted", "error", "overlap");
  out << "#\n# Validation: MoE expert layer, measured vs predicted from the profile\n" << buf;
  std::snprintf(buf, sizeof buf, "# %-26s %-17s %7s %9s %12s %12s %8s %8s\n", "", "", "", "", "(us)", "(us)", "(%)",
                "(%)");
  out << buf;
}

void print_validation_row(std::ostream& out, const ValidationRow& row) {
  long experts = 0;
  for (long t : row.c.tokens_per_expert) experts += t > 0;
  const bool two = row.c.kind == CaseKind::kTwoMicroBatches;
  char buf[512];
  char overlap[16];
  if (row.c.kind == CaseKind::kTraffic)
    std::snprintf(overlap, sizeof overlap, "%8.1f", row.overlap * 100.0);
  else
    std::snprintf(overlap, sizeof overlap, "%8s", "-");
  std::snprintf(buf, sizeof buf, "  %-26s %-17s %7ld %9.2f %12.2f %12.2f %+8.2f %s\n", row.c.label.c_str(),
                case_kind_name(row.c.kind), experts, row.flops / 1e9, row.measured * 1e6, row.predicted * 1e6,
                row.error() * 100.0, overlap);
  out << buf;
  if (two) {
    for (const PhaseRow& p : row.phases) {
      std::snprintf(buf, sizeof buf,
                    "    %-26s %6.2f MB: span %.2f (predicted %.2f); GEMMs %.2f alone, %.2f overlapped (predicted "
                    "%.2f, %.2f); traffic %.2f alone, %.2f overlapped (predicted %.2f, %.2f)\n",
                    p.phase.what.c_str(), p.phase.traffic.bytes / 1e6, p.span * 1e6, p.predicted.span() * 1e6,
                    p.gemm_alone * 1e6, p.gemm * 1e6, p.predicted.gemm * 1e6, p.predicted.gemm_end * 1e6,
                    p.comm_alone * 1e6, p.comm * 1e6, p.predicted.comm * 1e6, p.predicted.comm_end * 1e6);
      out << buf;
    }
    std::snprintf(buf, sizeof buf,
                  "    sequential (GEMMs, then traffic): %.2f (predicted %.2f, %+.2f%%); overlap gain %.2f%% "
                  "(predicted %.2f%%)\n",
                  row.measured_sequential * 1e6, row.predicted_sequential * 1e6, row.sequential_error() * 100.0,
                  row.measured_gain() * 100.0, row.predicted_gain() * 100.0);
    out << buf;
  }
  out << std::flush;
}

void print_validation_summary(std::ostream& out, const ValidationResult& r) {
  char buf[256];
  for (CaseKind kind : {CaseKind::kAlone, CaseKind::kTraffic, CaseKind::kTwoMicroBatches}) {
    std::vector<ValidationRow> rows;
    for (const ValidationRow& row : r.rows)
      if (row.c.kind == kind) rows.push_back(row);
    if (rows.empty()) continue;
    const ValidationResult k = summarize_validation(std::move(rows));
    std::snprintf(buf, sizeof buf, "#   %-17s %3zu cases: median |error| %.2f%%, worst %.2f%%\n", case_kind_name(kind),
                  k.rows.size(), k.median_abs_error * 100.0, k.max_abs_error * 100.0);
    out << buf;
  }
  std::snprintf(buf, sizeof buf, "# %zu cases: median |error| %.2f%% (goal <= 5%%), worst %.2f%% (goal <= 10%%): %s\n",
                r.rows.size(), r.median_abs_error * 100.0, r.max_abs_error * 100.0, r.passed() ? "PASS" : "FAIL");
  out << buf;
}

namespace {

void measure_two_batches(Device& device, const models::Profile& profile, const models::Architecture& arch, int tp,
                         models::CollectiveOp comm_op, const Traffic& traffic, const Timing& timing,
                         ValidationRow& row) {
  double p10 = 0.0, p90 = 0.0;
  row.measured = row.predicted = row.measured_sequential = row.predicted_sequential = 0.0;
  for (const Phase& phase : two_batch_phases(arch, row.c, tp, traffic)) {
    PhaseRow p;
    p.phase = phase;
    p.predicted = predict_phase(profile, arch, phase.tokens_per_expert, tp, comm_op, phase.traffic);
    const GemmWork work = expert_layer_work(arch, phase.tokens_per_expert, tp, arch.dtype);
    const ConcurrentRun run = device.time_concurrent(work, phase.traffic, timing);
    const Summary span = summarize(run.span);
    p.span = span.median;
    p.gemm = summarize(run.gemm).median;
    p.comm = summarize(run.comm).median;
    p.gemm_alone = summarize(run.gemm_alone).median;
    p.comm_alone = summarize(run.comm_alone).median;
    p.sequential = summarize(run.sequential).median;
    row.measured += p.span;
    p10 += span.p10;
    p90 += span.p90;
    row.predicted += p.predicted.span();
    row.measured_sequential += p.sequential;
    row.predicted_sequential += p.predicted.sequential();
    row.phases.push_back(std::move(p));
  }
  row.p10 = p10;
  row.p90 = p90;
}

}  // namespace

ValidationResult run_validation(Device& device, const models::Profile& profile, const models::Architecture& arch,
                                const std::vector<ValidationCase>& cases, int tp, const Traffic& traffic,
                                const Timing& timing, std::ostream& out) {
  print_validation_header(out);
  std::vector<ValidationRow> rows;
  // What an MoE layer's dispatch overlaps; NCCL traffic names its own collective.
  const models::CollectiveOp comm_op = traffic.op.value_or(models::CollectiveOp::kAllToAll);
  for (const ValidationCase& c : cases) {
    const GemmWork work = expert_layer_work(arch, c.tokens_per_expert, tp, arch.dtype);
    if (work.empty()) continue;
    ValidationRow row;
    row.c = c;
    row.flops = work_flops(work);
    if (c.kind == CaseKind::kTwoMicroBatches) {
      measure_two_batches(device, profile, arch, tp, comm_op, traffic, timing, row);
    } else {
      row.predicted = predict_case(profile, arch, c, tp, comm_op, traffic);
      if (c.kind == CaseKind::kAlone) {
        const Summary s = summarize(device.time_gemm(work, timing));
        row.measured = s.median;
        row.p10 = s.p10;
        row.p90 = s.p90;
      } else {
        const OverlapRun run = device.time_overlap(work, traffic, timing);
        const Summary s = summarize(run.gemm_overlapped);
        row.measured = s.median;
        row.p10 = s.p10;
        row.p90 = s.p90;
        row.overlap = run.gemm_overlap;
      }
    }
    print_validation_row(out, row);
    rows.push_back(std::move(row));
  }
  ValidationResult r = summarize_validation(std::move(rows));
  print_validation_summary(out, r);
  return r;
}

nlohmann::json validation_to_json(const ValidationResult& r, const DeviceInfo& device, const std::string& profile,
                                  const std::string& trace) {
  nlohmann::json rows = nlohmann::json::array();
  for (const ValidationRow& row : r.rows) {
    nlohmann::json j = {{"case", row.c.label},
                        {"layer", row.c.layer},
                        {"kind", case_kind_name(row.c.kind)},
                        {"with_traffic", row.c.kind != CaseKind::kAlone},
                        {"tokens_per_expert", row.c.tokens_per_expert},
                        {"gemm_flop", row.flops},
                        {"measured_s", row.measured},
                        {"measured_p10_s", row.p10},
                        {"measured_p90_s", row.p90},
                        {"predicted_s", row.predicted},
                        {"error", row.error()}};
    if (row.c.kind == CaseKind::kTraffic) j["overlap_fraction"] = row.overlap;
    if (row.c.kind == CaseKind::kTwoMicroBatches) {
      nlohmann::json phases = nlohmann::json::array();
      for (const PhaseRow& p : row.phases)
        phases.push_back({{"phase", p.phase.what},
                          {"gemm_tokens_per_expert", p.phase.tokens_per_expert},
                          {"traffic", traffic_label(p.phase.traffic)},
                          {"traffic_bytes", p.phase.traffic.bytes},
                          {"measured_span_s", p.span},
                          {"measured_gemm_end_s", p.gemm},
                          {"measured_traffic_end_s", p.comm},
                          {"measured_gemm_alone_s", p.gemm_alone},
                          {"measured_traffic_alone_s", p.comm_alone},
                          {"measured_sequential_s", p.sequential},
                          {"predicted_span_s", p.predicted.span()},
                          {"predicted_gemm_alone_s", p.predicted.gemm},
                          {"predicted_traffic_alone_s", p.predicted.comm},
                          {"predicted_compute_slowdown", p.predicted.compute_slowdown},
                          {"predicted_comm_slowdown", p.predicted.comm_slowdown},
                          {"predicted_gemm_end_s", p.predicted.gemm_end},
                          {"predicted_traffic_end_s", p.predicted.comm_end}});
      j["micro_batch_tokens"] = {row.c.halves[0].tokens, row.c.halves[1].tokens};
      j["phases"] = phases;
      j["measured_sequential_s"] = row.measured_sequential;
      j["predicted_sequential_s"] = row.predicted_sequential;
      j["sequential_error"] = row.sequential_error();
      j["measured_overlap_gain"] = row.measured_gain();
      j["predicted_overlap_gain"] = row.predicted_gain();
    }
    rows.push_back(std::move(j));
  }
  return {{"schema_version", 2},
          {"kind", "moesim-calibrate-validation"},
          {"context", {{"device", device.name}, {"profile", profile}, {"trace", trace}, {"date", utc_now()}}},
          {"cases", rows},
          {"median_abs_error", r.median_abs_error},
          {"max_abs_error", r.max_abs_error},
          {"passed", r.passed()}};
}

}  // namespace moesim::calibrate
