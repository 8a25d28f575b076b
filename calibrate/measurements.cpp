#include "calibrate/measurements.hpp"

#include <chrono>
#include <ctime>

#include "common/build_info.hpp"
#include "models/profile.hpp"

namespace moesim::calibrate {

using nlohmann::json;

double GemmRecord::tflops() const { return time.median > 0 ? work_flops({op}) / time.median / 1e12 : 0.0; }
double CollectiveRecord::algbw() const { return calibrate::algbw(traffic.bytes, time.median); }
double CollectiveRecord::busbw() const {
  return calibrate::busbw(traffic.op.value(), traffic.ranks, traffic.bytes, time.median);
}
double TrafficRecord::rate() const { return time.median > 0 ? traffic.bytes / time.median : 0.0; }
double ContentionRecord::compute_slowdown() const {
  return gemm_alone.median > 0 ? gemm_overlapped.median / gemm_alone.median : 1.0;
}
double ContentionRecord::comm_slowdown() const {
  return comm_alone.median > 0 ? comm_overlapped.median / comm_alone.median : 1.0;
}
bool ContentionRecord::overlapped(double threshold) const {
  return run.gemm_overlap >= threshold && run.comm_overlap >= threshold;
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

json summary_json(const Summary& s) {
  return {{"count", s.count}, {"median_s", s.median}, {"p10_s", s.p10}, {"p90_s", s.p90},
          {"min_s", s.min},   {"max_s", s.max},       {"mean_s", s.mean}, {"cv", s.cv}};
}
json op_json(const GemmOp& o) {
  return {{"dtype", models::dtype_name(o.dtype)}, {"m", o.m}, {"n", o.n}, {"k", o.k}};
}
json work_json(const GemmWork& w) {
  json a = json::array();
  for (const GemmOp& o : w) a.push_back(op_json(o));
  return a;
}
json traffic_json(const Traffic& t) {
  json j = {{"kind", t.kind}, {"bytes", t.bytes}, {"ranks", t.ranks}, {"ctas", t.ctas}};
  if (t.op) j["op"] = models::collective_op_name(*t.op);
  if (!t.traffic_matrix.empty()) j["traffic_matrix"] = t.traffic_matrix;
  return j;
}
json power_json(const PowerRecord& p) {
  return {{"state", p.state.state},
          {"dtype", p.state.dtype ? models::dtype_name(*p.state.dtype) : std::string()},
          {"gemm", work_json(p.state.gemm)},
          {"traffic", p.state.traffic.kind.empty() ? json() : traffic_json(p.state.traffic)},
          {"power_limit_W", p.power_limit},
          {"sm_clock_limit_Hz", p.clock_limit},
          {"seconds", p.run.seconds},
          {"energy_J", p.run.energy},
          {"average_power_W", p.run.average_power},
          {"sampled_power_W", p.run.sampled_power},
          {"sm_clock_Hz", p.run.sm_clock},
          {"mem_clock_Hz", p.run.mem_clock},
          {"temperature_C", p.run.temperature},
          {"gemm_flops_per_s", p.run.work_rate},
          {"energy_counter", p.run.energy_counter}};
}

}  // namespace

json measurements_to_json(const Measurements& m) {
  const DeviceInfo& d = m.device;
  json j;
  j["schema_version"] = 1;
  j["kind"] = "moesim-calibrate-raw";
  j["context"] = {{"tool", "moesim-calibrate"},
                  {"version", common::kVersion},
                  {"git_revision", common::kGitRevision},
                  {"build_type", common::kBuildType},
                  {"build", m.device.build},
                  {"plan", m.plan},
                  {"started", m.started},
                  {"finished", m.finished}};
  j["device"] = {{"name", d.name},
                 {"index", d.index},
                 {"gpu_count", d.gpu_count},
                 {"sm_count", d.sm_count},
                 {"compute_capability", d.compute_capability},
                 {"memory_bytes", d.memory},
                 {"l2_bytes", d.l2_bytes},
                 {"max_sm_clock_Hz", d.max_sm_clock},
                 {"max_mem_clock_Hz", d.max_mem_clock},
                 {"power_limit_W", d.power_limit},
                 {"default_power_limit_W", d.default_power_limit},
                 {"min_power_limit_W", d.min_power_limit},
                 {"max_power_limit_W", d.max_power_limit},
                 {"pcie_generation", d.pcie_generation},
                 {"pcie_width", d.pcie_width},
                 {"pci_bus_id", d.pci_bus_id},
                 {"driver", d.driver},
                 {"cuda_runtime", d.cuda_runtime},
                 {"cuda_driver_api", d.cuda_driver_api},
                 {"cublaslt", d.cublaslt},
                 {"cublaslt_path", d.cublaslt_path},
                 {"nccl", d.nccl_version},
                 {"nccl_path", d.nccl_path},
                 {"nvml_path", d.nvml_path},
                 {"host", d.host}};
  json& g = j["gemm"] = json::array();
  for (const GemmRecord& r : m.gemms)
    g.push_back({{"op", op_json(r.op)}, {"samples_s", r.samples}, {"time", summary_json(r.time)}, {"tflops", r.tflops()}});
  json& gg = j["grouped_gemm"] = json::array();
  for (const GroupedRecord& r : m.grouped)
    gg.push_back({{"label", r.label},
                  {"work", work_json(r.work)},
                  {"samples_s", r.samples},
                  {"time", summary_json(r.time)},
                  {"singles_sum_s", r.singles_sum}});
  json& c = j["collectives"] = json::array();
  for (const CollectiveRecord& r : m.collectives)
    c.push_back({{"traffic", traffic_json(r.traffic)},
                 {"label", r.label},
                 {"samples_s", r.samples},
                 {"time", summary_json(r.time)},
                 {"algbw_GBps", r.algbw() / 1e9},
                 {"busbw_GBps", r.busbw() / 1e9},
                 {"wrong", r.wrong}});
  json& t = j["traffic"] = json::array();
  for (const TrafficRecord& r : m.traffic)
    t.push_back({{"traffic", traffic_json(r.traffic)},
                 {"samples_s", r.samples},
                 {"time", summary_json(r.time)},
                 {"rate_GBps", r.rate() / 1e9}});
  json& k = j["contention"] = json::array();
  for (const ContentionRecord& r : m.contention)
    k.push_back({{"gemm", work_json(r.gemm)},
                 {"gemm_flop", work_flops(r.gemm)},
                 {"traffic", traffic_json(r.traffic)},
                 {"grid", r.in_grid ? models::contention_op_name(r.comm_op) : std::string()},
                 {"gemm_alone", summary_json(r.gemm_alone)},
                 {"gemm_overlapped", summary_json(r.gemm_overlapped)},
                 {"comm_alone", summary_json(r.comm_alone)},
                 {"comm_overlapped", summary_json(r.comm_overlapped)},
                 {"samples_s",
                  {{"gemm_alone", r.run.gemm_alone},
                   {"gemm_overlapped", r.run.gemm_overlapped},
                   {"comm_alone", r.run.comm_alone},
                   {"comm_overlapped", r.run.comm_overlapped}}},
                 {"gemm_overlap_fraction", r.run.gemm_overlap},
                 {"comm_overlap_fraction", r.run.comm_overlap},
                 {"compute_slowdown", r.compute_slowdown()},
                 {"comm_slowdown", r.comm_slowdown()},
                 {"overlapped", r.overlapped()}});
  json& p = j["power"] = json::array();
  for (const PowerRecord& r : m.power) p.push_back(power_json(r));
  json& ps = j["power_sweep"] = json::array();
  for (const PowerRecord& r : m.power_sweep) ps.push_back(power_json(r));
  return j;
}

}  // namespace moesim::calibrate
