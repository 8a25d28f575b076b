#include "calibrate/fit.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "calibrate/plan.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "common/stats.hpp"
#include "common/yaml.hpp"
#include "models/costs.hpp"

namespace moesim::calibrate {

using models::Provenance;
using models::SourceKind;

std::vector<double> monotone(std::vector<double> y) {
  for (std::size_t i = 1; i < y.size(); ++i) y[i] = std::max(y[i], y[i - 1]);
  return y;
}

double fit_launch_floor(const std::vector<GroupedRecord>& grouped, models::Dtype dtype, double min_time) {
  std::vector<double> floors;
  for (const GroupedRecord& g : grouped) {
    if (g.work.size() < 2 || g.work.front().dtype != dtype || g.time.median <= 0.0) continue;
    floors.push_back((g.singles_sum - g.time.median) / static_cast<double>(g.work.size() - 1));
  }
  if (floors.empty()) return 0.0;
  return std::clamp(common::percentile(floors, 0.5), 0.0, min_time);
}

double pcie_lane_rate(int generation) {
  switch (generation) {
    case 1: return 0.25e9;
    case 2: return 0.5e9;
    case 3: return 0.985e9;
    case 4: return 1.969e9;
    case 5: return 3.938e9;
    case 6: return 7.563e9;
    default: return 0.0;
  }
}

namespace {

Provenance measured(const FitOptions& o, const std::string& what) {
  return {SourceKind::kMeasured, o.method + (what.empty() ? "" : "; " + what)};
}

// The datasheet peak for dtypes the base lacks, from its 16-bit peak (Hopper/Ampere ratios).
double peak_for(const models::Profile& base, models::Dtype dtype) {
  if (const models::GemmTable* t = base.gemm_table(dtype)) return t->peak_flops;
  const models::GemmTable* half = base.gemm_table(models::Dtype::kBf16);
  if (!half) half = base.gemm_table(models::Dtype::kFp16);
  const double p = half ? half->peak_flops : 989e12;
  if (dtype == models::Dtype::kFp8) return 2.0 * p;
  if (dtype == models::Dtype::kTf32) return p / 2.0;
  if (dtype == models::Dtype::kFp32) return p / 14.8;
  return p;
}

}  // namespace

models::Profile fit_profile(const Measurements& m, const models::Profile& base, const FitOptions& o) {
  models::Profile p;
  p.name = o.name;
  p.base = o.base;
  p.description = "Measured by moesim-calibrate (" + m.plan + " plan) on " + m.device.name + ", " + m.started +
                  "; tables it could not measure come from " + o.base + ".";
  const DeviceInfo& d = m.device;

  // device
  p.device.name = d.name;
  p.device.sm_count = d.sm_count;
  p.device.memory = d.memory;
  p.device.hbm_bandwidth = base.device.hbm_bandwidth;
  std::string device_note = "SMs, memory and versions from the CUDA runtime";
  for (const TrafficRecord& t : m.traffic)
    if (t.traffic.kind == "copy_kernel" && t.time.median > 0) {
      p.device.hbm_bandwidth = 2.0 * t.traffic.bytes / t.time.median;  // STREAM copy: read + write
      device_note += "; hbm_bandwidth: copy kernel of " + std::to_string(static_cast<long long>(t.traffic.bytes)) +
                     " B, read + written bytes / median time";
    }
  p.device.sm_clock = d.max_sm_clock > 0 ? d.max_sm_clock : base.device.sm_clock;
  std::vector<double> clocks;
  for (const PowerRecord& r : m.power)
    if (r.state.state == "compute" && r.run.sm_clock > 0) clocks.push_back(r.run.sm_clock);
  if (!clocks.empty()) {
    p.device.sm_clock = common::percentile(clocks, 0.5);
    device_note += "; sm_clock: NVML, median over the compute states";
  }
  p.device.extra = {{"driver", d.driver},
                    {"cuda_runtime", d.cuda_runtime},
                    {"cublaslt", d.cublaslt},
                    {"host", d.host},
                    {"gpus", std::to_string(d.gpu_count)},
                    {"nodes", m.ranks > 1 ? std::to_string(m.nodes) : std::string()},
                    {"compute_capability",
                     std::to_string(d.compute_capability / 10) + "." + std::to_string(d.compute_capability % 10)},
                    {"l2", std::to_string(static_cast<long long>(d.l2_bytes)) + " B"}};
  if (!d.nccl_version.empty()) p.device.extra["nccl"] = d.nccl_version;
  if (!d.pci_bus_id.empty()) p.device.extra["pci_bus_id"] = d.pci_bus_id;
  for (auto it = p.device.extra.begin(); it != p.device.extra.end();)
    it = it->second.empty() ? p.device.extra.erase(it) : std::next(it);
  p.device.provenance = measured(o, device_note);

  // gemm: one curve per (dtype, n, k)
  std::map<models::Dtype, std::map<std::pair<long, long>, std::vector<const GemmRecord*>>> by_shape;
  for (const GemmRecord& r : m.gemms) by_shape[r.op.dtype][{r.op.n, r.op.k}].push_back(&r);
  for (const models::Dtype dtype : kAllDtypes) {
    auto it = by_shape.find(dtype);
    if (it == by_shape.end()) continue;
    models::GemmTable t;
    t.dtype = dtype;
    double best = 0.0, min_time = 1e300;
    for (auto& [shape, records] : it->second) {
      std::sort(records.begin(), records.end(), [](auto* a, auto* b) { return a->op.m < b->op.m; });
      models::GemmCurve c;
      c.n = shape.first;
      c.k = shape.second;
      for (const GemmRecord* r : records) {
        if (!c.m.empty() && c.m.back() == static_cast<double>(r->op.m)) continue;
        c.m.push_back(static_cast<double>(r->op.m));
        c.time.push_back(r->time.median);
        best = std::max(best, r->tflops() * 1e12);
      }
      c.time = monotone(c.time);
      min_time = std::min(min_time, c.time.front());
      t.curves.push_back(std::move(c));
    }
    // The table's efficiencies are relative to the datasheet peak; a GPU that beats it (boost) lifts it.
    t.peak_flops = std::max(peak_for(base, dtype), best * 1.06);
    // Launch cost does not depend on the dtype: a dtype without grouped runs takes the grouped dtype's.
    double floor = fit_launch_floor(m.grouped, dtype, min_time);
    bool borrowed = false;
    if (floor <= 0.0)
      for (const GroupedRecord& g : m.grouped)
        if (!g.work.empty() && (floor = fit_launch_floor(m.grouped, g.work.front().dtype, min_time)) > 0.0) {
          borrowed = true;
          break;
        }
    t.launch_floor = floor > 0.0 ? floor : min_time;
    std::size_t samples = 0;
    for (const GemmRecord& r : m.gemms)
      if (r.op.dtype == dtype) samples = std::max(samples, r.samples.size());
    t.provenance = measured(o, "cuBLASLt " + d.cublaslt + ", median of " + std::to_string(samples) +
                                   " samples per point, made non-decreasing in m; launch_floor " +
                                   (floor <= 0.0 ? "= the shortest time"
                                    : borrowed ? "from the grouped GEMMs of another dtype: (sum of singles - grouped) / (G - 1)"
                                               : "= (sum of single GEMMs - grouped) / (G - 1)"));
    p.gemm.push_back(std::move(t));
  }

  // collectives: uniform curves, in the order of their op names (the order fitted profiles list them in),
  // then ranks and scope
  using CurveKey = std::tuple<models::CollectiveOp, int, bool>;
  auto by_op_name = [](const CurveKey& a, const CurveKey& b) {
    return std::tuple(models::collective_op_name(std::get<0>(a)), std::get<1>(a), std::get<2>(a)) <
           std::tuple(models::collective_op_name(std::get<0>(b)), std::get<1>(b), std::get<2>(b));
  };
  std::map<CurveKey, std::vector<const CollectiveRecord*>, decltype(by_op_name)> curves;
  for (const CollectiveRecord& r : m.collectives)
    if (r.label == "uniform" && r.wrong == 0)
      curves[{r.traffic.op.value(), r.traffic.ranks, r.inter_node}].push_back(&r);
  const std::string who = m.ranks > 1
                              ? std::to_string(m.ranks) + " processes (one per GPU) on " + std::to_string(m.nodes) +
                                    " node" + (m.nodes > 1 ? "s" : "") + ", median over the ranks of each rank's median"
                              : "";
  for (auto& [key, records] : curves) {
    std::sort(records.begin(), records.end(), [](auto* a, auto* b) { return a->traffic.bytes < b->traffic.bytes; });
    models::CollectiveCurve c;
    c.op = std::get<0>(key);
    c.ranks = std::get<1>(key);
    c.scope = std::get<2>(key) ? "inter_node" : "intra_node";
    for (const CollectiveRecord* r : records) {
      if (!c.bytes.empty() && c.bytes.back() >= r->traffic.bytes) continue;
      c.bytes.push_back(r->traffic.bytes);
      c.time.push_back(r->time.median);
    }
    if (c.bytes.size() < 2) continue;
    c.time = monotone(c.time);
    c.provenance = measured(
        o, "NCCL " + d.nccl_version + ", " +
               (m.ranks > 1
                    ? who + (c.op == models::CollectiveOp::kSendRecv
                                 ? " (send/recv: rank 0 and rank " + std::to_string(records.front()->traffic.peer) + ")"
                                 : "")
                    : "one process driving " + std::to_string(c.ranks) + " GPUs, median time") +
               ", nccl-tests sizes; sizes with #wrong > 0 dropped");
    p.collectives.push_back(std::move(c));
  }

  // links
  p.nvlink = {};
  p.pcie = {};
  p.nic = {};
  if (auto it = curves.find({models::CollectiveOp::kSendRecv, 2, false});
      it != curves.end() && it->second.size() >= 2) {
    const CollectiveRecord* largest = it->second.back();
    const double nominal = d.compute_capability >= 90 ? 450e9 : 300e9;  // per direction
    p.nvlink.bandwidth_efficiency = std::clamp(largest->algbw() / nominal, 1e-3, 1.0);
    p.nvlink.latency = it->second.front()->time.median;
    p.nvlink.provenance = measured(o,
                                   "send_recv between 2 GPUs of a node: largest size's algbw / nominal per direction; "
                                   "latency = the smallest size's time");
  }
  for (const TrafficRecord& t : m.traffic)
    if (t.traffic.kind == "copy_engine" && d.pcie_generation > 0 && d.pcie_width > 0 && t.time.median > 0) {
      const double nominal = pcie_lane_rate(d.pcie_generation) * d.pcie_width;
      p.pcie.bandwidth_efficiency = std::clamp(t.rate() / nominal, 1e-3, 1.0);
      p.pcie.latency = 0.0;
      p.pcie.provenance = measured(o, "copy engine device-to-host to pinned memory / PCIe Gen" +
                                          std::to_string(d.pcie_generation) + " x" + std::to_string(d.pcie_width));
    }

  // contention grids by (op, the GEMM's roofline class, the SMs the communication held), in the
  // order of their op names ("any" among them), then class, then SMs
  using GridKey = std::tuple<std::optional<models::CollectiveOp>, models::ComputeClass, int>;
  auto by_grid_name = [](const GridKey& a, const GridKey& b) {
    const std::string na = models::contention_op_name(std::get<0>(a)), nb = models::contention_op_name(std::get<0>(b));
    if (na != nb) return na < nb;
    if (std::get<1>(a) != std::get<1>(b)) return std::get<1>(a) < std::get<1>(b);
    return std::get<2>(a) < std::get<2>(b);
  };
  std::map<GridKey, std::map<std::pair<double, double>, const ContentionRecord*>, decltype(by_grid_name)> grids;
  for (const ContentionRecord& r : m.contention) {
    if (!r.in_grid) continue;
    double gemm_bytes = 0.0;
    for (const GemmOp& g : r.gemm)
      gemm_bytes += models::gemm_bytes(g.dtype, static_cast<double>(g.m), static_cast<double>(g.n), static_cast<double>(g.k));
    const models::ComputeClass cls = models::compute_class(p, r.dtype, work_flops(r.gemm), gemm_bytes);
    // NCCL's channels and the copy kernel's blocks each hold an SM; the copy engine holds none.
    const int sms = r.traffic.kind == "copy_engine" ? 0 : r.traffic.ctas > 0 ? r.traffic.ctas : -1;
    grids[GridKey{r.comm_op, cls, sms}][{r.traffic.bytes, work_flops(r.gemm)}] = &r;
  }
  int not_overlapped = 0;
  for (const auto& [key, cells] : grids) {
    const auto& [op, cls, sms] = key;
    std::set<double> bytes, flops;
    for (const auto& [point, r] : cells) {
      bytes.insert(point.first);
      flops.insert(point.second);
    }
    if (cells.size() != bytes.size() * flops.size()) continue;  // incomplete grid: raw JSON only
    for (double b : bytes)
      for (double f : flops) {
        const ContentionRecord* r = cells.at({b, f});
        if (!r->overlapped()) ++not_overlapped;
        p.contention.points.push_back({op, cls, sms, b, f, std::clamp(r->compute_slowdown(), 1.0, 1000.0),
                                       std::clamp(r->comm_slowdown(), 1.0, 1000.0)});
      }
  }
  if (!p.contention.points.empty()) {
    const std::string how =
        m.device.gpu_count > 1
            ? "GEMM on one stream, NCCL collective on another" + (m.ranks > 1 ? "; " + who : std::string())
            : "GEMM on one stream, an SM copy kernel on 16 CTAs (as NCCL's channels) on another";
    const std::string check = not_overlapped == 0 ? "every point overlapped (event timestamps)"
                                                  : std::to_string(not_overlapped) + " points overlapped less than 90%";
    p.contention.provenance = measured(o, how + "; GEMM time overlapped / alone, clamped at 1; " + check);
    p.contention.comm_provenance = measured(o, how + "; communication time overlapped / alone, clamped at 1");
    p.contention.comm_sms = 16;
    p.contention.sms_provenance.kind = models::SourceKind::kModel;
    p.contention.sms_provenance.detail =
        "NCCL's usual 16 channels (one SM each), the middle of the measured CTA sweep; a study's dispatch.sms overrides it";
  }

  // power
  bool have_power = false;
  for (const PowerRecord& r : m.power) have_power = have_power || r.run.seconds > 0;
  if (have_power && d.nvml) {
    models::PowerModel w;
    w.max_power = d.default_power_limit > 0 ? d.default_power_limit : base.power.max_power;
    w.min_power_limit = std::min(d.min_power_limit > 0 ? d.min_power_limit : base.power.min_power_limit, w.max_power);
    auto clampw = [&](double v) { return std::clamp(v, 1.0, w.max_power); };
    for (const PowerRecord& r : m.power) {
      if (r.state.state == "idle") w.idle = clampw(r.run.average_power);
      if (r.state.state == "communication") w.communication = clampw(r.run.average_power);
    }
    for (const PowerRecord& r : m.power) {
      if (r.state.state == "compute") w.compute[r.state.dtype.value()] = clampw(std::max(r.run.average_power, w.idle));
    }
    w.communication = std::max(w.communication, w.idle);
    for (const PowerRecord& r : m.power)
      if (r.state.state == "overlapped") {
        const models::Dtype dtype = r.state.dtype.value();
        const double c = w.compute.count(dtype) ? w.compute[dtype] : w.idle;
        w.overlapped[dtype] = clampw(std::max({r.run.average_power, c, w.communication}));
      }
    for (const auto& [dtype, watts] : w.compute)
      if (!w.overlapped.count(dtype)) w.overlapped[dtype] = std::max(watts, w.communication);
    // A memory-bound GEMM loop: the power of kernels below the roofline ridge (models::kernel_power).
    for (const PowerRecord& r : m.power)
      if (r.state.state == "memory_bound" && w.compute.count(r.state.dtype.value()))
        w.memory_bound[r.state.dtype.value()] = clampw(std::max(r.run.average_power, w.idle));
    w.provenance = measured(o, "NVML energy counter over ~1 s per state, as found (power limit " +
                                   std::to_string(static_cast<int>(d.power_limit)) + " W)");
    // Cap curve: the sweep when it was allowed, else the base's, with its own provenance.
    std::vector<std::pair<double, double>> cap;
    double full_rate = 0.0;
    for (const PowerRecord& r : m.power_sweep)
      if (r.power_limit > 0 && r.clock_limit == 0 && r.power_limit >= w.max_power * 0.999) full_rate = r.run.work_rate;
    for (const PowerRecord& r : m.power_sweep)
      if (r.power_limit > 0 && r.clock_limit == 0 && full_rate > 0)
        cap.push_back({std::min(1.0, r.power_limit / w.max_power), std::clamp(r.run.work_rate / full_rate, 1e-3, 1.0)});
    std::sort(cap.begin(), cap.end());
    if (cap.size() >= 2) {
      for (const auto& [c, s] : cap) {
        w.cap_fraction.push_back(c);
        w.speed_fraction.push_back(s);
      }
      w.speed_fraction = monotone(w.speed_fraction);
      w.cap_provenance = measured(o, "bf16 GEMM rate under NVML power limits (--allow-set-power-limit), restored after");
      w.min_power_limit = std::min(w.min_power_limit, w.cap_fraction.front() * w.max_power);
    } else {
      w.cap_fraction = base.power.cap_fraction;
      w.speed_fraction = base.power.speed_fraction;
      w.cap_provenance = base.power.cap_provenance;
      if (!w.cap_fraction.empty()) w.min_power_limit = std::max(w.min_power_limit, w.cap_fraction.front() * w.max_power);
      w.min_power_limit = std::min(w.min_power_limit, w.max_power);
    }
    std::vector<std::tuple<double, double, double>> clk;
    double base_rate = 0.0, base_power = 0.0;
    for (const PowerRecord& r : m.power_sweep)
      if (r.clock_limit > 0 && r.clock_limit >= d.max_sm_clock * 0.999) {
        base_rate = r.run.work_rate;
        base_power = r.run.average_power;
      }
    for (const PowerRecord& r : m.power_sweep)
      if (r.clock_limit > 0 && base_rate > 0 && base_power > 0 && d.max_sm_clock > 0)
        clk.emplace_back(std::min(1.0, r.clock_limit / d.max_sm_clock), std::clamp(r.run.work_rate / base_rate, 1e-3, 1.0),
                         std::clamp(r.run.average_power / base_power, 1e-3, 1.0));
    std::sort(clk.begin(), clk.end());
    if (clk.size() >= 2) {
      for (const auto& [c, s, pw] : clk) {
        w.clock_fraction.push_back(c);
        w.clock_speed_fraction.push_back(s);
        w.clock_power_fraction.push_back(pw);
      }
      w.clock_speed_fraction = monotone(w.clock_speed_fraction);
      w.clock_power_fraction = monotone(w.clock_power_fraction);
      w.clock_provenance = measured(o, "bf16 GEMM rate and power under NVML locked SM clocks (--allow-set-clocks), reset after");
    } else {
      w.clock_fraction = base.power.clock_fraction;
      w.clock_speed_fraction = base.power.clock_speed_fraction;
      w.clock_power_fraction = base.power.clock_power_fraction;
      w.clock_provenance = base.power.clock_provenance;
    }
    p.power = std::move(w);
  }
  return p;
}

std::string profile_text(const models::Profile& profile, const std::filesystem::path& path) {
  const std::string text = models::profile_to_yaml(profile);
  const common::YamlDocument doc = common::YamlDocument::load_string(text, path.string());
  models::parse_profile(doc.root(), profile.name);  // throws on anything the loader would refuse
  return text;
}

std::filesystem::path default_raw_path(const std::filesystem::path& profile_path) {
  std::filesystem::path raw = profile_path;
  raw.replace_extension(".raw.json");
  return raw;
}

void write_outputs(const models::Profile& profile, const Measurements& m, const std::filesystem::path& profile_path,
                   const std::filesystem::path& raw_path, bool overwrite) {
  write_outputs(profile, measurements_to_json(m), profile_path, raw_path, overwrite);
}

void write_outputs(const models::Profile& profile, const nlohmann::json& raw, const std::filesystem::path& profile_path,
                   const std::filesystem::path& raw_path, bool overwrite) {
  common::check_can_write(profile_path, overwrite);
  common::check_can_write(raw_path, overwrite);
  const std::string yaml = profile_text(profile, profile_path);
  common::write_file_atomic(raw_path, raw.dump(2) + "\n", overwrite);
  common::write_file_atomic(profile_path, yaml, overwrite);
}

}  // namespace moesim::calibrate
