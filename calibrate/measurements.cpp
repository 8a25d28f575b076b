#include "calibrate/measurements.hpp"

#include <chrono>
#include <ctime>

#include "common/build_info.hpp"
#include "common/error.hpp"
#include "common/strings.hpp"
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
  if (t.op == models::CollectiveOp::kSendRecv) j["peer"] = t.peer;
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
  if (m.ranks > 1) j["merged"] = {{"ranks", m.ranks}, {"nodes", m.nodes}};
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
                 {"wrong", r.wrong},
                 {"scope", r.inter_node ? "inter_node" : "intra_node"}});
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

namespace {

Summary summary_from(const json& j) {
  Summary s;
  s.count = j.at("count").get<int>();
  s.median = j.at("median_s").get<double>();
  s.p10 = j.at("p10_s").get<double>();
  s.p90 = j.at("p90_s").get<double>();
  s.min = j.at("min_s").get<double>();
  s.max = j.at("max_s").get<double>();
  s.mean = j.at("mean_s").get<double>();
  s.cv = j.at("cv").get<double>();
  return s;
}
models::Dtype dtype_from(const json& j) {
  const std::string name = j.get<std::string>();
  const std::optional<models::Dtype> d = common::enum_from_name<models::Dtype>(models::kDtypes, name);
  if (!d) throw common::RunError("unknown dtype \"" + name + "\"");
  return *d;
}
GemmOp op_from(const json& j) {
  return {dtype_from(j.at("dtype")), j.at("m").get<long>(), j.at("n").get<long>(), j.at("k").get<long>()};
}
GemmWork work_from(const json& j) {
  GemmWork w;
  for (const json& o : j) w.push_back(op_from(o));
  return w;
}
std::optional<models::CollectiveOp> collective_from(const std::string& name) {
  for (models::CollectiveOp op :
       {models::CollectiveOp::kAllReduce, models::CollectiveOp::kAllGather, models::CollectiveOp::kReduceScatter,
        models::CollectiveOp::kAllToAll, models::CollectiveOp::kSendRecv})
    if (models::collective_op_name(op) == name) return op;
  throw common::RunError("unknown collective \"" + name + "\"");
}
Traffic traffic_from(const json& j) {
  Traffic t;
  t.kind = j.at("kind").get<std::string>();
  t.bytes = j.at("bytes").get<double>();
  t.ranks = j.at("ranks").get<int>();
  t.ctas = j.at("ctas").get<int>();
  if (j.contains("op")) t.op = collective_from(j.at("op").get<std::string>());
  if (j.contains("traffic_matrix")) t.traffic_matrix = j.at("traffic_matrix").get<std::vector<double>>();
  if (j.contains("peer")) t.peer = j.at("peer").get<int>();
  return t;
}
PowerRecord power_from(const json& j) {
  PowerRecord p;
  p.state.state = j.at("state").get<std::string>();
  if (!j.at("dtype").get<std::string>().empty()) p.state.dtype = dtype_from(j.at("dtype"));
  p.state.gemm = work_from(j.at("gemm"));
  if (!j.at("traffic").is_null()) p.state.traffic = traffic_from(j.at("traffic"));
  p.state.seconds = j.at("seconds").get<double>();
  p.power_limit = j.at("power_limit_W").get<double>();
  p.clock_limit = j.at("sm_clock_limit_Hz").get<double>();
  p.run.seconds = j.at("seconds").get<double>();
  p.run.energy = j.at("energy_J").get<double>();
  p.run.average_power = j.at("average_power_W").get<double>();
  p.run.sampled_power = j.at("sampled_power_W").get<double>();
  p.run.sm_clock = j.at("sm_clock_Hz").get<double>();
  p.run.mem_clock = j.at("mem_clock_Hz").get<double>();
  p.run.temperature = j.at("temperature_C").get<double>();
  p.run.work_rate = j.at("gemm_flops_per_s").get<double>();
  p.run.energy_counter = j.at("energy_counter").get<bool>();
  return p;
}

}  // namespace

Measurements measurements_from_json(const json& j) {
  try {
    Measurements m;
    const json& c = j.at("context");
    m.plan = c.at("plan").get<std::string>();
    m.started = c.at("started").get<std::string>();
    m.finished = c.at("finished").get<std::string>();
    const json& d = j.at("device");
    DeviceInfo& i = m.device;
    i.build = c.at("build").get<std::string>();
    i.name = d.at("name").get<std::string>();
    i.index = d.at("index").get<int>();
    i.gpu_count = d.at("gpu_count").get<int>();
    i.sm_count = d.at("sm_count").get<int>();
    i.compute_capability = d.at("compute_capability").get<int>();
    i.memory = d.at("memory_bytes").get<double>();
    i.l2_bytes = d.at("l2_bytes").get<double>();
    i.max_sm_clock = d.at("max_sm_clock_Hz").get<double>();
    i.max_mem_clock = d.at("max_mem_clock_Hz").get<double>();
    i.power_limit = d.at("power_limit_W").get<double>();
    i.default_power_limit = d.at("default_power_limit_W").get<double>();
    i.min_power_limit = d.at("min_power_limit_W").get<double>();
    i.max_power_limit = d.at("max_power_limit_W").get<double>();
    i.pcie_generation = d.at("pcie_generation").get<int>();
    i.pcie_width = d.at("pcie_width").get<int>();
    i.pci_bus_id = d.at("pci_bus_id").get<std::string>();
    i.driver = d.at("driver").get<std::string>();
    i.cuda_runtime = d.at("cuda_runtime").get<std::string>();
    i.cuda_driver_api = d.at("cuda_driver_api").get<std::string>();
    i.cublaslt = d.at("cublaslt").get<std::string>();
    i.cublaslt_path = d.at("cublaslt_path").get<std::string>();
    i.nccl_version = d.at("nccl").get<std::string>();
    i.nccl = !i.nccl_version.empty();
    i.nccl_path = d.at("nccl_path").get<std::string>();
    i.nvml_path = d.at("nvml_path").get<std::string>();
    i.host = d.at("host").get<std::string>();
    i.nvml = !j.at("power").empty();
    if (j.contains("merged")) {
      m.ranks = j.at("merged").at("ranks").get<int>();
      m.nodes = j.at("merged").at("nodes").get<int>();
    }
    for (const json& r : j.at("gemm"))
      m.gemms.push_back(
          {op_from(r.at("op")), r.at("samples_s").get<std::vector<double>>(), summary_from(r.at("time"))});
    for (const json& r : j.at("grouped_gemm"))
      m.grouped.push_back({r.at("label").get<std::string>(), work_from(r.at("work")),
                           r.at("samples_s").get<std::vector<double>>(), summary_from(r.at("time")),
                           r.at("singles_sum_s").get<double>()});
    for (const json& r : j.at("collectives"))
      m.collectives.push_back({traffic_from(r.at("traffic")), r.at("label").get<std::string>(),
                               r.at("samples_s").get<std::vector<double>>(), summary_from(r.at("time")),
                               r.at("wrong").get<long>(), r.value("scope", std::string("intra_node")) == "inter_node"});
    for (const json& r : j.at("traffic"))
      m.traffic.push_back(
          {traffic_from(r.at("traffic")), r.at("samples_s").get<std::vector<double>>(), summary_from(r.at("time"))});
    for (const json& r : j.at("contention")) {
      ContentionRecord k;
      k.gemm = work_from(r.at("gemm"));
      k.dtype = k.gemm.empty() ? models::Dtype::kBf16 : k.gemm.front().dtype;
      k.traffic = traffic_from(r.at("traffic"));
      const std::string grid = r.at("grid").get<std::string>();
      k.in_grid = !grid.empty();
      if (k.in_grid && grid != "any") k.comm_op = collective_from(grid);
      const json& s = r.at("samples_s");
      k.run.gemm_alone = s.at("gemm_alone").get<std::vector<double>>();
      k.run.gemm_overlapped = s.at("gemm_overlapped").get<std::vector<double>>();
      k.run.comm_alone = s.at("comm_alone").get<std::vector<double>>();
      k.run.comm_overlapped = s.at("comm_overlapped").get<std::vector<double>>();
      k.run.gemm_overlap = r.at("gemm_overlap_fraction").get<double>();
      k.run.comm_overlap = r.at("comm_overlap_fraction").get<double>();
      k.gemm_alone = summary_from(r.at("gemm_alone"));
      k.gemm_overlapped = summary_from(r.at("gemm_overlapped"));
      k.comm_alone = summary_from(r.at("comm_alone"));
      k.comm_overlapped = summary_from(r.at("comm_overlapped"));
      m.contention.push_back(std::move(k));
    }
    for (const json& r : j.at("power")) m.power.push_back(power_from(r));
    for (const json& r : j.at("power_sweep")) m.power_sweep.push_back(power_from(r));
    return m;
  } catch (const json::exception& e) {
    throw common::RunError(std::string("cannot read a rank's measurements: ") + e.what());
  }
}

}  // namespace moesim::calibrate
