// The measuring device as the host side sees it: what one calibration asks a GPU (or a fake in
// tests) to time, and what comes back. Times are seconds per operation (a sample's batch divided by
// its operation count), bytes are bytes, power watts, energy joules, clocks hertz. The CUDA
// implementation lives in calibrate/cuda and is the only code that includes CUDA, NCCL or NVML.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "models/collective_op.hpp"
#include "models/dtype.hpp"

namespace moesim::calibrate {

// No usable GPU (none present, no driver, a driver too old for the runtime, or a build without
// CUDA). Exit code 1, like every RunError; the message says which and what to do.
class NoGpuError : public common::RunError {
 public:
  using common::RunError::RunError;
};

// The device cannot run one requested measurement (no cuBLASLt algorithm for a dtype and shape): the
// runner reports it and goes on.
class UnsupportedError : public common::RunError {
 public:
  using common::RunError::RunError;
};

struct DeviceInfo {
  std::string name;  // "NVIDIA H200"
  int index = 0;
  int gpu_count = 1;  // GPUs this run drives (NCCL ranks)
  int sm_count = 0;
  int compute_capability = 0;  // 90 for sm_90
  double memory = 0.0;         // bytes
  double l2_bytes = 0.0;
  double max_sm_clock = 0.0;   // Hz
  double max_mem_clock = 0.0;  // Hz
  bool fp8 = false;            // cuBLASLt fp8 GEMMs (sm_89+)
  bool nvml = false;           // power, clocks and energy readable
  bool nccl = false;           // NCCL loaded
  double power_limit = 0.0;          // W, current
  double default_power_limit = 0.0;  // W
  double min_power_limit = 0.0;      // W, lowest settable
  double max_power_limit = 0.0;      // W, highest settable
  int pcie_generation = 0;
  int pcie_width = 0;
  std::string pci_bus_id;
  std::string driver, cuda_runtime, cuda_driver_api, cublaslt, nccl_version, host;
  std::string cublaslt_path, nccl_path, nvml_path;  // where the libraries were loaded from
  std::string build;  // build_description() of the measuring part
};

// One GEMM C[m, n] = A[m, k] B[k, n] in `dtype`; a GemmWork is a sequence of them issued back to
// back (one op: a plain GEMM; several: a grouped expert GEMM, issued as one graph launch).
struct GemmOp {
  models::Dtype dtype = models::Dtype::kBf16;
  long m = 0;
  long n = 0;
  long k = 0;
};
using GemmWork = std::vector<GemmOp>;
double work_flops(const GemmWork& work);

// Communication traffic: an NCCL collective, or on a single GPU the traffic a communication kernel
// generates: an SM copy kernel on `ctas` blocks (as NCCL's channels occupy SMs) or copy-engine
// transfers to pinned host memory.
struct Traffic {
  std::string kind;  // "nccl", "copy_kernel", "copy_engine"
  std::optional<models::CollectiveOp> op;  // nccl: the collective; none for copy traffic
  double bytes = 0.0;  // nccl-tests' size for nccl; bytes copied otherwise
  int ranks = 1;
  int ctas = 0;                        // copy_kernel: blocks; nccl: NCCL_MAX_CTAS (0 = NCCL's default)
  std::vector<double> traffic_matrix;  // all_to_all: ranks x ranks relative weights; empty = uniform
  int peer = 1;                        // send_recv: between rank 0 and this rank
};
std::string traffic_label(const Traffic& traffic);

// How to time: warm-up launches, then `repetitions` samples of `inner` back-to-back operations
// (0: chosen by the device so that a sample lasts at least `min_sample` seconds).
struct Timing {
  int warmup = 3;
  int repetitions = 10;
  int inner = 0;
  double min_sample = 50e-6;
};

struct CollectiveRun {
  std::vector<double> times;  // s per collective
  long wrong = 0;             // elements that differed from the expected result (nccl-tests' #wrong)
};

// A GEMM and a traffic run each alone and each while the other runs throughout on another stream.
// overlap_* is the fraction of the measured operation's interval during which the other stream was
// busy (from event timestamps): near 1 when they really overlapped.
struct OverlapRun {
  std::vector<double> gemm_alone, comm_alone, gemm_overlapped, comm_overlapped;  // s per operation
  double gemm_overlap = 0.0;
  double comm_overlap = 0.0;
};

// GEMM work and ONE traffic operation started together on two streams (both released by one event),
// and the same two back to back (the traffic starts when the GEMMs end). Per sample, s (one pair per
// sample, not per operation): `span` from the common start until both streams are done; `gemm` and
// `comm` from the common start until that stream is done; `sequential` from the GEMMs' start until
// the traffic after them is done; `gemm_alone` and `comm_alone` each part of that sequential run.
// What one phase of two-batch overlap is: one micro-batch's experts while the other's dispatch or
// combine moves.
struct ConcurrentRun {
  std::vector<double> span, gemm, comm;
  std::vector<double> sequential, gemm_alone, comm_alone;
};

// One power state held for about `seconds`.
struct PowerState {
  std::string state;  // "idle", "compute", "memory_bound", "communication", "overlapped"
  std::optional<models::Dtype> dtype;  // compute, memory_bound and overlapped
  GemmWork gemm;                       // compute, memory_bound and overlapped
  Traffic traffic;    // communication and overlapped
  double seconds = 1.0;
};
struct PowerRun {
  double seconds = 0.0;
  double energy = 0.0;         // J from the energy counter (or integrated samples)
  double average_power = 0.0;  // W = energy / seconds
  double sampled_power = 0.0;  // W, mean of the instantaneous readings
  double sm_clock = 0.0;       // Hz, mean
  double mem_clock = 0.0;      // Hz, mean
  double temperature = 0.0;    // degrees C, at the end
  double work_rate = 0.0;      // GEMM FLOP/s achieved in the state (0 without GEMM)
  bool energy_counter = false;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const = 0;
  virtual std::vector<double> time_gemm(const GemmWork& work, const Timing& timing) = 0;
  virtual CollectiveRun time_collective(const Traffic& traffic, const Timing& timing) = 0;
  virtual std::vector<double> time_traffic(const Traffic& traffic, const Timing& timing) = 0;
  virtual OverlapRun time_overlap(const GemmWork& work, const Traffic& traffic, const Timing& timing) = 0;
  // `timing.inner` is ignored: a sample is one concurrent pair (and one sequential pair).
  virtual ConcurrentRun time_concurrent(const GemmWork& work, const Traffic& traffic, const Timing& timing) = 0;
  virtual PowerRun measure_power(const PowerState& state) = 0;
  // Power-limit and clock control; the device restores what it found when destroyed (and on
  // SIGINT/SIGTERM, through the interruption check between measurements). Watts / hertz; 0 resets.
  virtual void set_power_limit(double watts) = 0;
  virtual void set_sm_clock_limit(double hertz) = 0;
  // Called from another thread when a step shared with other processes overran its deadline (a peer
  // died or hung inside NCCL): abort the communication so that the blocked call returns with an error.
  virtual void abort_communication() {}
};

// A run with one process per GPU (calibrate/cluster.hpp): this process's place, and the host-side
// exchanges the device needs. Every rank calls them in the same order.
struct ClusterHooks {
  int world = 1;  // processes (NCCL ranks); 1: this process drives `gpus` GPUs alone
  int rank = 0;
  int local_rank = 0;                                        // the GPU of a process that sees several
  std::function<std::string(const std::string&)> broadcast;  // rank 0's bytes on every rank (NCCL unique ids)
  std::function<double(double)> max;  // the largest value over the ranks (launch counts all must share)
};

struct DeviceRequest {
  int gpus = 1;
  bool allow_set_power_limit = false;
  bool allow_set_clocks = false;
  bool fake = false;  // --fake-device: calibrate/fake_device.hpp instead of a GPU
  ClusterHooks cluster;
};

// Lists the GPUs (one line each) or throws NoGpuError.
std::vector<std::string> list_devices();
// Opens the device(s); throws NoGpuError without a usable GPU. Implemented by calibrate/cuda or,
// in builds without CUDA, by calibrate/no_cuda.
std::unique_ptr<Device> open_device(const DeviceRequest& request);
// "CUDA 13.0 (cuBLASLt, NCCL and NVML loaded at run time)" or "built without CUDA".
std::string build_description();

}  // namespace moesim::calibrate
