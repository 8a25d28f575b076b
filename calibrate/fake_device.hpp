// A fake Device: times follow a known "true" cost function (a launch floor plus work at an
// efficiency that grows with m, copy traffic at a fixed rate, known slowdowns when overlapped, known
// watts), with a small deterministic jitter. The tests check with it that fitting recovers the
// truth and that predictions from the fitted profile match it; `moesim-calibrate --fake-device`
// runs on it so that scripts around the binary (tools/gpu-validate.sh) can be tested without a GPU.
// Its DeviceInfo says it is fake (name, host, build), and so does every profile written from it.
// In a cluster run (one process per GPU, FakeWorld) a collective over the ranks takes
// latency + busbw_factor(op, ranks) x bytes / bandwidth (NVLink-like within a node, NIC-like across
// nodes), and rank r's host timer reads it (1 + 0.002 (r mod 4)) times, so ranks differ a little. A
// rank listed in `slowdown` runs its GEMMs and copies that many times slower; a stalled rank hangs in
// its first collective until the communication is aborted (for the robustness tests).
// GEMMs and one traffic operation started together (time_concurrent) share the GPU as the
// simulator's executor has them share it: while both run, the GEMMs advance at 1 / s_c of their
// speed alone (s_c = true_compute_slowdown(bytes)) and the traffic at 1 / kCommSlowdown; whichever is
// left runs at full speed (true_concurrent). Run back to back they take the sum of their times.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "calibrate/device.hpp"
#include "models/costs.hpp"

namespace moesim::calibrate {

// This process's place among fake GPUs started one per process (world 1: the classic fake).
struct FakeWorld {
  int rank = 0;
  int world = 1;
  std::vector<int> node_of_rank;  // by rank; empty: all on one node
  std::vector<double> slowdown;   // by rank, >= 1 (--fake-slow-rank); empty: none
  int stall_rank = -1;            // --fake-stall-rank
  std::ostream* log = nullptr;    // where a stalling rank says so
};

class FakeDevice : public Device {
 public:
  static constexpr double kFloor = 4e-6;        // s per launch
  static constexpr double kPeak = 800e12;       // FLOP/s at full efficiency (16-bit)
  static constexpr double kHalf = 96.0;         // m at half efficiency
  static constexpr double kCopyRate = 3.0e12;   // B/s of HBM traffic (read + write)
  static constexpr double kPcieRate = 50e9;     // B/s copy engine
  static constexpr double kIdle = 80.0, kCompute = 610.0, kMemoryBound = 470.0, kComm = 190.0, kBoth = 690.0;  // W

  // `name`: what the device calls itself (the base profile is chosen by it: "H200" gives h200).
  static constexpr double kIntraBw = 300e9, kInterBw = 45e9;             // B/s of a collective's busbw
  static constexpr double kIntraLatency = 10e-6, kInterLatency = 25e-6;  // s

  explicit FakeDevice(int gpus = 1, std::string name = "NVIDIA H200", FakeWorld world = {}) : world_(std::move(world)) {
    if (world_.rank < static_cast<int>(world_.slowdown.size()))
      speed_ = world_.slowdown[static_cast<std::size_t>(world_.rank)];
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
    info_.nccl = gpus > 1 || world_.world > 1;
    info_.nccl_version = info_.nccl ? "2.28.9" : "";
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
  // When GEMMs of `gemm` s alone and traffic of `comm` s alone, started together, end (s from the
  // start): each advances at 1/slowdown while both run, alone at full speed afterwards.
  struct ConcurrentEnds {
    double gemm = 0.0;
    double comm = 0.0;
  };
  static ConcurrentEnds true_concurrent(double gemm, double comm, double compute_slowdown, double comm_slowdown) {
    if (gemm * compute_slowdown <= comm * comm_slowdown) {
      const double t = gemm * compute_slowdown;
      return {t, t + comm - t / comm_slowdown};
    }
    const double t = comm * comm_slowdown;
    return {t + gemm - t / compute_slowdown, t};
  }

  // A collective of a cluster run as every rank's timer would see it without the per-rank skew.
  double true_cluster_collective(const Traffic& t) const {
    const bool across = spans_nodes(t);
    const models::CollectiveOp op = t.op.value_or(models::CollectiveOp::kAllReduce);
    return (across ? kInterLatency : kIntraLatency) +
           models::busbw_factor(op, t.ranks) * t.bytes / (across ? kInterBw : kIntraBw);
  }
  // What rank `rank` reads for a collective of a cluster run.
  double cluster_collective_reading(const Traffic& t, int rank) const {
    return true_cluster_collective(t) * (1.0 + 0.002 * (rank % 4));
  }
  double comm_time(const Traffic& t) const {
    if (world_.world > 1 && t.kind == "nccl") return cluster_collective_reading(t, world_.rank);
    return true_traffic(t) * (t.kind == "nccl" ? 1.0 : speed_);
  }

  const DeviceInfo& info() const override { return info_; }
  std::vector<double> time_gemm(const GemmWork& w, const Timing& t) override {
    ++gemm_calls;
    return jitter(true_work(w) * speed_, t.repetitions);
  }
  CollectiveRun time_collective(const Traffic& tr, const Timing& t) override {
    if (world_.world > 1) stall_if_asked();
    return {jitter(comm_time(tr), t.repetitions), 0};
  }
  std::vector<double> time_traffic(const Traffic& tr, const Timing& t) override {
    return jitter(comm_time(tr), t.repetitions);
  }
  OverlapRun time_overlap(const GemmWork& w, const Traffic& tr,
                                     const Timing& t) override {
    if (world_.world > 1 && tr.kind == "nccl") stall_if_asked();
    OverlapRun r;
    r.gemm_alone = jitter(true_work(w) * speed_, t.repetitions);
    r.comm_alone = jitter(comm_time(tr), t.repetitions);
    r.gemm_overlapped = jitter(true_work(w) * speed_ * true_compute_slowdown(tr.bytes), t.repetitions);
    r.comm_overlapped = jitter(comm_time(tr) * kCommSlowdown, t.repetitions);
    r.gemm_overlap = r.comm_overlap = 0.99;
    return r;
  }
  ConcurrentRun time_concurrent(const GemmWork& w, const Traffic& tr, const Timing& t) override {
    if (world_.world > 1 && tr.kind == "nccl") stall_if_asked();
    const double g = true_work(w) * speed_, c = comm_time(tr);
    const ConcurrentEnds e = true_concurrent(g, c, true_compute_slowdown(tr.bytes), kCommSlowdown);
    ConcurrentRun r;
    // One jitter factor per sample: each sample's span is exactly the later of its two ends.
    for (int i = 0; i < t.repetitions; ++i) {
      const double f = 1.0 + 0.004 * ((i * 7 + counter_++) % 5 - 2);
      r.gemm.push_back(e.gemm * f);
      r.comm.push_back(e.comm * f);
      r.span.push_back(std::max(e.gemm, e.comm) * f);
      r.gemm_alone.push_back(g * f);
      r.comm_alone.push_back(c * f);
      r.sequential.push_back((g + c) * f);
    }
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
    r.work_rate = s.gemm.empty() ? 0.0 : work_flops(s.gemm) / (true_work(s.gemm) * speed_) * speed;
    r.energy_counter = true;
    return r;
  }
  void set_power_limit(double watts) override { power_limit_ = watts; }
  void set_sm_clock_limit(double) override {}
  void abort_communication() override { aborted_ = true; }

  int gemm_calls = 0;

 private:
  bool spans_nodes(const Traffic& t) const {
    if (world_.node_of_rank.empty()) return false;
    const auto& n = world_.node_of_rank;
    if (t.op == models::CollectiveOp::kSendRecv)
      return t.peer < static_cast<int>(n.size()) && n[static_cast<std::size_t>(t.peer)] != n[0];
    return std::any_of(n.begin(), n.end(), [&](int x) { return x != n[0]; });
  }
  // The stalled rank hangs, as a GPU stuck in NCCL would, until its communication is aborted (the
  // step watchdog) or an hour passes.
  void stall_if_asked() {
    if (aborted_) throw common::RunError("the fake device's communication was aborted");
    if (world_.rank != world_.stall_rank || stalled_) return;
    stalled_ = true;
    if (world_.log)
      *world_.log << "fake device: rank " << world_.rank << " stalls in its first collective (--fake-stall-rank)"
                  << std::endl;
    const auto until = std::chrono::steady_clock::now() + std::chrono::hours(1);
    while (!aborted_ && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    throw common::RunError("the fake device's communication was aborted while it stalled");
  }
  std::vector<double> jitter(double t, int n) {
    std::vector<double> out;
    for (int i = 0; i < n; ++i) out.push_back(t * (1.0 + 0.004 * ((i * 7 + counter_++) % 5 - 2)));
    return out;
  }
  FakeWorld world_;
  DeviceInfo info_;
  double speed_ = 1.0;  // this rank's slowdown
  double power_limit_ = 0.0;
  int counter_ = 0;
  std::atomic<bool> aborted_{false};
  bool stalled_ = false;
};

}  // namespace moesim::calibrate
