#include "calibrate/runner.hpp"

#include <map>

#include "calibrate/report.hpp"
#include "common/error.hpp"

namespace moesim::calibrate {

namespace {

void check(const std::function<bool()>& interrupted) {
  if (interrupted && interrupted()) throw common::RunError("interrupted by a signal: no profile written");
}

PowerState sweep_state(const Plan& plan) {
  for (const PowerState& s : plan.power)
    if (s.state == "compute" && (s.dtype == models::Dtype::kBf16 || s.dtype == models::Dtype::kFp16)) return s;
  for (const PowerState& s : plan.power)
    if (s.state == "compute") return s;
  return {};
}

}  // namespace

Measurements run_plan(Device& device, const Plan& plan, std::ostream& log, const std::function<bool()>& interrupted,
                      const PeerStep& with_peers) {
  auto shared = [&](const Traffic& t, const std::string& label, const std::function<void()>& step) {
    if (with_peers && t.kind == "nccl")
      with_peers(label, step);
    else
      step();
  };
  Measurements m;
  m.device = device.info();
  m.plan = plan_kind_name(plan.kind);
  m.started = utc_now();
  print_context(log, m.device, m.plan);

  print_gemm_header(log);
  std::map<std::tuple<models::Dtype, long, long, long>, double> single;
  for (const GemmCurveCase& c : plan.gemms)
    for (long mm : c.m) {
      check(interrupted);
      GemmRecord r{{c.dtype, mm, c.n, c.k}, {}, {}};
      try {
        r.samples = device.time_gemm({r.op}, plan.gemm_timing);
      } catch (const UnsupportedError& e) {
        log << "  " << models::dtype_name(c.dtype) << " m=" << mm << " n=" << c.n << " k=" << c.k << ": unsupported ("
            << e.what() << ")\n";
        continue;
      }
      r.time = summarize(r.samples);
      single[{c.dtype, mm, c.n, c.k}] = r.time.median;
      print_gemm_row(log, r);
      m.gemms.push_back(std::move(r));
    }

  if (!plan.grouped.empty()) log << "#\n# Grouped expert GEMMs (one graph launch) against the same GEMMs one by one\n";
  for (const GroupedCase& g : plan.grouped) {
    check(interrupted);
    GroupedRecord r{g.label, g.work, {}, {}, 0.0};
    try {
      r.samples = device.time_gemm(g.work, plan.gemm_timing);
      for (const GemmOp& op : g.work) {
        auto it = single.find({op.dtype, op.m, op.n, op.k});
        if (it == single.end())
          it = single.emplace(std::make_tuple(op.dtype, op.m, op.n, op.k),
                              summarize(device.time_gemm({op}, plan.gemm_timing)).median)
                   .first;
        r.singles_sum += it->second;
      }
    } catch (const UnsupportedError& e) {
      log << "  grouped " << g.label << ": unsupported (" << e.what() << ")\n";
      continue;
    }
    r.time = summarize(r.samples);
    print_grouped_row(log, r);
    m.grouped.push_back(std::move(r));
  }

  if (!plan.collectives.empty()) print_collective_header(log);
  for (const CollectiveCase& c : plan.collectives)
    for (double bytes : c.sizes) {
      check(interrupted);
      Traffic t = c.traffic;
      t.bytes = bytes;
      CollectiveRun run;
      shared(t,
             "collective " + traffic_label(t) + " " + c.label +
                 (t.op == models::CollectiveOp::kSendRecv ? " ranks 0-" + std::to_string(t.peer) : std::string()) +
                 ", " + std::to_string(static_cast<long long>(bytes)) + " B",
             [&] { run = device.time_collective(t, plan.comm_timing); });
      CollectiveRecord r{t, c.label, run.times, summarize(run.times), run.wrong, c.inter_node};
      print_collective_row(log, r);
      m.collectives.push_back(std::move(r));
    }

  log << "#\n# Copy traffic alone (copy kernel on all SMs: HBM rate = 2 x bytes / time; copy engine to pinned host memory)\n";
  for (const Traffic& t : plan.single_gpu_traffic) {
    check(interrupted);
    TrafficRecord r{t, device.time_traffic(t, plan.gemm_timing), {}};
    r.time = summarize(r.samples);
    print_traffic_row(log, r);
    m.traffic.push_back(std::move(r));
  }

  if (!plan.contention.empty()) print_contention_header(log);
  for (const ContentionCase& c : plan.contention) {
    check(interrupted);
    ContentionRecord r;
    r.gemm = c.gemm;
    r.dtype = c.dtype;
    r.traffic = c.traffic;
    r.in_grid = c.in_grid;
    r.comm_op = c.comm_op;
    try {
      shared(c.traffic,
             "contention " + traffic_label(c.traffic) + " " + std::to_string(static_cast<long long>(c.traffic.bytes)) +
                 " B x " + std::to_string(static_cast<long long>(work_flops(c.gemm))) + " FLOP",
             [&] { r.run = device.time_overlap(c.gemm, c.traffic, plan.gemm_timing); });
    } catch (const UnsupportedError& e) {
      log << "  " << models::dtype_name(c.dtype) << " x " << traffic_label(c.traffic) << ": unsupported (" << e.what()
          << ")\n";
      continue;
    }
    r.gemm_alone = summarize(r.run.gemm_alone);
    r.comm_alone = summarize(r.run.comm_alone);
    r.gemm_overlapped = summarize(r.run.gemm_overlapped);
    r.comm_overlapped = summarize(r.run.comm_overlapped);
    print_contention_row(log, r);
    m.contention.push_back(std::move(r));
  }

  if (m.device.nvml) {
    print_power_header(log);
    for (const PowerState& s : plan.power) {
      check(interrupted);
      PowerRecord r{s, {}, m.device.power_limit, 0.0};
      shared(s.traffic, "power " + s.state + (s.dtype ? " " + models::dtype_name(*s.dtype) : std::string()),
             [&] { r.run = device.measure_power(s); });
      print_power_row(log, r);
      m.power.push_back(std::move(r));
    }
    const PowerState sweep = sweep_state(plan);
    for (double f : plan.power_limit_fractions) {
      check(interrupted);
      const double watts = std::max(m.device.min_power_limit, f * m.device.default_power_limit);
      device.set_power_limit(watts);
      PowerRecord r{sweep, device.measure_power(sweep), watts, 0.0};
      print_power_row(log, r);
      m.power_sweep.push_back(std::move(r));
    }
    if (!plan.power_limit_fractions.empty()) device.set_power_limit(0.0);
    for (double f : plan.clock_fractions) {
      check(interrupted);
      const double hz = f * m.device.max_sm_clock;
      device.set_sm_clock_limit(hz);
      PowerRecord r{sweep, device.measure_power(sweep), 0.0, hz};
      print_power_row(log, r);
      m.power_sweep.push_back(std::move(r));
    }
    if (!plan.clock_fractions.empty()) device.set_sm_clock_limit(0.0);
  } else {
    log << "#\n# Power: NVML not available, no power states measured (the base profile supplies them)\n";
  }
  m.finished = utc_now();
  return m;
}

}  // namespace moesim::calibrate
