#include "calibrate/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "calibrate/measurements.hpp"
#include "calibrate/stats.hpp"
#include "common/error.hpp"
#include "models/costs.hpp"

namespace moesim::calibrate {

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
    std::vector<std::vector<long>> counts(layers.size(), std::vector<long>(meta.shape.num_experts, 0));
    long taken = 0;
    traces::TokenBlock block;
    while (taken < batch && trace.next(block, static_cast<std::size_t>(batch - taken))) {
      for (std::size_t t = 0; t < block.size(); ++t)
        for (std::size_t li = 0; li < layers.size(); ++li)
          for (int k = 0; k < topk; ++k)
            ++counts[li][block.experts[(t * nl + layers[li]) * topk + k]];
      taken += static_cast<long>(block.size());
    }
    if (taken < batch)
      throw common::UsageError("--batches: the trace has " + std::to_string(taken) + " tokens, fewer than " +
                               std::to_string(batch));
    for (std::size_t li = 0; li < layers.size(); ++li)
      for (bool traffic : {false, true})
        cases.push_back({"layer " + std::to_string(layers[li]) + ", " + std::to_string(batch) + " tokens", layers[li],
                         counts[li], traffic});
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

double predict_case(const models::Profile& profile, const models::Architecture& arch, const ValidationCase& c, int tp,
                    models::CollectiveOp comm_op, double traffic_bytes) {
  const models::ExpertWork w = models::grouped_expert_time(profile, arch, c.tokens_per_expert, tp);
  if (!c.with_traffic) return w.time;
  return w.time * models::contention(profile, comm_op, traffic_bytes, w.flops).compute;
}

ValidationResult summarize_validation(std::vector<ValidationRow> rows) {
  ValidationResult r;
  r.rows = std::move(rows);
  std::vector<double> errs;
  for (const ValidationRow& row : r.rows) errs.push_back(std::abs(row.error()));
  if (!errs.empty()) {
    r.median_abs_error = percentile(errs, 0.5);
    r.max_abs_error = *std::max_element(errs.begin(), errs.end());
  }
  return r;
}

void print_validation_header(std::ostream& out) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "# %-26s %-8s %7s %9s %12s %12s %8s %8s\n", "case", "traffic", "experts", "GFLOP",
                "measured", "predicted", "error", "overlap");
  out << "#\n# Validation: MoE expert layer, measured vs predicted from the profile\n" << buf;
  std::snprintf(buf, sizeof buf, "# %-26s %-8s %7s %9s %12s %12s %8s %8s\n", "", "", "", "", "(us)", "(us)", "(%)", "(%)");
  out << buf;
}

void print_validation_row(std::ostream& out, const ValidationRow& row) {
  long experts = 0;
  for (long t : row.c.tokens_per_expert) experts += t > 0;
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %-26s %-8s %7ld %9.2f %12.2f %12.2f %+8.2f %8.1f\n", row.c.label.c_str(),
                row.c.with_traffic ? "yes" : "no", experts, row.flops / 1e9, row.measured * 1e6, row.predicted * 1e6,
                row.error() * 100.0, row.overlap * 100.0);
  out << buf << std::flush;
}

void print_validation_summary(std::ostream& out, const ValidationResult& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "# %zu cases: median |error| %.2f%% (goal <= 5%%), worst %.2f%% (goal <= 10%%): %s\n",
                r.rows.size(), r.median_abs_error * 100.0, r.max_abs_error * 100.0, r.passed() ? "PASS" : "FAIL");
  out << buf;
}

ValidationResult run_validation(Device& device, const models::Profile& profile, const models::Architecture& arch,
                                const std::vector<ValidationCase>& cases, int tp, const Traffic& traffic,
                                const Timing& timing, std::ostream& out) {
  print_validation_header(out);
  std::vector<ValidationRow> rows;
  const models::CollectiveOp comm_op = models::CollectiveOp::kAllToAll;  // what an MoE layer's dispatch overlaps
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const ValidationCase& c = cases[i];
    const GemmWork work = expert_layer_work(arch, c.tokens_per_expert, tp, arch.dtype);
    ValidationRow row{c, work_flops(work), 0, predict_case(profile, arch, c, tp, comm_op, traffic.bytes), 0, 0, 1.0};
    if (work.empty()) continue;
    if (!c.with_traffic) {
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
  for (const ValidationRow& row : r.rows)
    rows.push_back({{"case", row.c.label},
                    {"layer", row.c.layer},
                    {"with_traffic", row.c.with_traffic},
                    {"tokens_per_expert", row.c.tokens_per_expert},
                    {"gemm_flop", row.flops},
                    {"measured_s", row.measured},
                    {"measured_p10_s", row.p10},
                    {"measured_p90_s", row.p90},
                    {"predicted_s", row.predicted},
                    {"error", row.error()},
                    {"overlap_fraction", row.overlap}});
  return {{"schema_version", 1},
          {"kind", "moesim-calibrate-validation"},
          {"context", {{"device", device.name}, {"profile", profile}, {"trace", trace}, {"date", utc_now()}}},
          {"cases", rows},
          {"median_abs_error", r.median_abs_error},
          {"max_abs_error", r.max_abs_error},
          {"passed", r.passed()}};
}

}  // namespace moesim::calibrate
