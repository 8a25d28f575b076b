// A fake Device: times follow a known "true" cost function (a launch floor plus work at an
// efficiency that grows with m, copy traffic at a fixed rate, known slowdowns when overlapped, known
// watts), with a small deterministic jitter. The tests check with it that fitting recovers the
// truth and that predictions from the fitted profile match it; `moesim-calibrate --fake-device`
// runs on it so that scripts around the binary (tools/gpu-validate.sh) can be tested without a GPU.
// Its DeviceInfo says it is fake (name, host, build), and so does every profile written from it.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "calibrate/device.hpp"

namespace moesim::calibrate {

class FakeDevice : public Device {
 public:
  static constexpr double kFloor = 4e-6;        // s per launch
  static constexpr double kPeak = 800e12;       // FLOP/s at full efficiency (16-bit)
  static constexpr double kHalf = 96.0;         // m at half efficiency
  static constexpr double kCopyRate = 3.0e12;   // B/s of HBM traffic (read + write)
  static constexpr double kPcieRate = 50e9;     // B/s copy engine
  static constexpr double kIdle = 80.0, kCompute = 610.0, kMemoryBound = 470.0, kComm = 190.0, kBoth = 690.0;  // W

  // `name`: what the device calls itself (the base profile is chosen by it: "H200" gives h200).
  explicit FakeDevice(int gpus = 1, std::string name = "NVIDIA H200") {
    info_.name = std::move(name);
    info_.gpu_count = gpus;
    info_.sm_count = 132;
    info_.compute_capability = 90;
    info_.memory = 150e9;
    info_.l2_bytes = 50e6;
    info_.max_sm_clock = 1980e6;
    info_.max_mem_clock = 3201e6;
    info_.fp8 = true;
    info_.nvml = true;
    info_.nccl = gpus > 1;
    info_.nccl_version = gpus > 1 ? "2.28.9" : "";
    info_.power_limit = info_.default_power_limit = info_.max_power_limit = 700.0;
    info_.min_power_limit = 200.0;
    info_.pcie_generation = 5;
    info_.pcie_width = 16;
    info_.driver = "580.00";
    info_.cuda_runtime = "13.0";
    info_.cublaslt = "13.1.0";
    info_.host = "fake";
    info_.build = "fake device";
  }
  static double true_gemm(const GemmOp& op) {
    const double m = static_cast<double>(op.m), n = static_cast<double>(op.n), k = static_cast<double>(op.k);
    const double scale = op.dtype == models::Dtype::kFp8    ? 2.0
                         : op.dtype == models::Dtype::kFp32 ? 1.0 / 14.8
                         : op.dtype == models::Dtype::kTf32 ? 0.5
                                                            : 1.0;
    return 2.0 * m * n * k / (kPeak * scale * m / (m + kHalf));
  }
  // One floor per launch: a grouped work (one graph) pays it once.
  static double true_work(const GemmWork& w) {
    double t = kFloor;
    for (const GemmOp& op : w) t += true_gemm(op);
    return t;
  }
  static double true_traffic(const Traffic& t) {
    if (t.kind == "copy_engine") return 5e-6 + t.bytes / kPcieRate;
    if (t.kind == "nccl") return 10e-6 + t.bytes / 300e9;
    return 3e-6 + 2.0 * t.bytes / kCopyRate;
  }
  static double true_compute_slowdown(double bytes) { return 1.0 + 0.25 * bytes / (bytes + 64e6); }
  static constexpr double kCommSlowdown = 1.12;

  const DeviceInfo& info() const override { return info_; }
  std::vector<double> time_gemm(const GemmWork& w, const Timing& t) override {
    ++gemm_calls;
    return jitter(true_work(w), t.repetitions);
  }
  CollectiveRun time_collective(const Traffic& tr, const Timing& t) override {
    return {jitter(true_traffic(tr), t.repetitions), 0};
  }
  std::vector<double> time_traffic(const Traffic& tr, const Timing& t) override {
    return jitter(true_traffic(tr), t.repetitions);
  }
  OverlapRun time_overlap(const GemmWork& w, const Traffic& tr,
                                     const Timing& t) override {
    OverlapRun r;
    r.gemm_alone = jitter(true_work(w), t.repetitions);
    r.comm_alone = jitter(true_traffic(tr), t.repetitions);
    r.gemm_overlapped = jitter(true_work(w) * true_compute_slowdown(tr.bytes), t.repetitions);
    r.comm_overlapped = jitter(true_traffic(tr) * kCommSlowdown, t.repetitions);
    r.gemm_overlap = r.comm_overlap = 0.99;
    return r;
  }
  PowerRun measure_power(const PowerState& s) override {
    PowerRun r;
    r.seconds = s.seconds;
    double w = s.state == "idle"            ? kIdle
               : s.state == "compute"       ? kCompute
               : s.state == "memory_bound"  ? kMemoryBound
               : s.state == "communication" ? kComm
                                            : kBoth;
    double speed = 1.0;
    if (power_limit_ > 0 && w > power_limit_) {
      speed = power_limit_ / w;
      w = power_limit_;
    }
    r.average_power = r.sampled_power = w;
    r.energy = w * s.seconds;
    r.sm_clock = 1980e6 * speed;
    r.mem_clock = 3201e6;
    r.temperature = 50;
    r.work_rate = s.gemm.empty() ? 0.0 : work_flops(s.gemm) / true_work(s.gemm) * speed;
    r.energy_counter = true;
    return r;
  }
  void set_power_limit(double watts) override { power_limit_ = watts; }
  void set_sm_clock_limit(double) override {}

  int gemm_calls = 0;

 private:
  std::vector<double> jitter(double t, int n) {
    std::vector<double> out;
    for (int i = 0; i < n; ++i) out.push_back(t * (1.0 + 0.004 * ((i * 7 + counter_++) % 5 - 2)));
    return out;
  }
  DeviceInfo info_;
  double power_limit_ = 0.0;
  int counter_ = 0;
};

}  // namespace moesim::calibrate
