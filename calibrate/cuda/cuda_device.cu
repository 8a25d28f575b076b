// The CUDA implementation of calibrate::Device: cuBLASLt GEMMs (grouped ones as one CUDA graph), NCCL
// collectives driven by one process over the node's GPUs or, in a cluster run, by one process per GPU
// (ncclCommInitRank with a unique id rank 0 sends over the launcher's TCP connections), copy-kernel and
// copy-engine traffic, two-stream overlap with event timestamps, and NVML power, energy and clocks.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#include "calibrate/cuda/check.hpp"
#include "calibrate/cuda/kernels.hpp"
#include "calibrate/cuda/libs.hpp"
#include "calibrate/device.hpp"
#include "calibrate/stats.hpp"
#include "common/error.hpp"
#include "common/stats.hpp"

namespace moesim::calibrate {

namespace cuda {
namespace {

using Clock = std::chrono::steady_clock;

std::string version_text(int v, int major_div, int minor_div) {
  return std::to_string(v / major_div) + "." + std::to_string((v % major_div) / minor_div);
}

// NCCL's headers do not come with every CUDA 12 toolkit (the build may take them from a separate NCCL
// or PyTorch's nvidia-nccl wheel): ncclConfig_t's maxCTAs, used below, needs 2.17 or later.
static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 17, 0), "nccl.h 2.17 or later is needed (ncclConfig_t maxCTAs)");

struct DtypeInfo {
  cudaDataType_t ab;
  cudaDataType_t cd;
  cublasComputeType_t compute;
  ElementType eab;
  ElementType ecd;
};

DtypeInfo dtype_info(models::Dtype d) {
  switch (d) {
    case models::Dtype::kFp32:
      return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, ElementType::kF32, ElementType::kF32};
    case models::Dtype::kTf32:
      return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, ElementType::kF32, ElementType::kF32};
    case models::Dtype::kBf16:
      return {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, ElementType::kBf16, ElementType::kBf16};
    case models::Dtype::kFp16:
      return {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, ElementType::kF16, ElementType::kF16};
    case models::Dtype::kFp8:
      return {CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, ElementType::kFp8E4m3, ElementType::kBf16};
  }
  throw common::UsageError("unknown GEMM dtype \"" + models::dtype_name(d) + "\"");
}

std::size_t align256(std::size_t b) { return (b + 255) / 256 * 256; }

// A grow-only device allocation on the current device.
struct DeviceBuffer {
  void* p = nullptr;
  std::size_t bytes = 0;
  int device = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }
  void release() {
    if (p) {
      int cur = 0;
      cudaGetDevice(&cur);
      cudaSetDevice(device);
      cudaFree(p);
      cudaSetDevice(cur);
    }
    p = nullptr;
    bytes = 0;
  }
  // Returns true when it (re)allocated.
  bool reserve(std::size_t b) {
    if (b <= bytes) return false;
    release();
    MOESIM_CUDA(cudaGetDevice(&device));
    MOESIM_CUDA(cudaMalloc(&p, b));
    bytes = b;
    return true;
  }
  char* at(std::size_t offset) const { return static_cast<char*>(p) + offset; }
};

struct PinnedBuffer {
  void* p = nullptr;
  std::size_t bytes = 0;
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (p) cudaFreeHost(p);
  }
  void reserve(std::size_t b) {
    if (b <= bytes) return;
    if (p) cudaFreeHost(p);
    p = nullptr;
    MOESIM_CUDA(cudaMallocHost(&p, b));
    bytes = b;
  }
};

// NCCL communicators with one CTA limit, their streams and buffers: either one process drives all n
// ranks (rank i on GPU i), or this process is one rank of n (a cluster run, one GPU per process).
struct Comms {
  const Nccl* nccl = nullptr;
  int n = 0;                // ranks in the communicator
  int first_rank = 0;       // the global rank of local communicator 0
  int home = 0;             // the device calls return to
  std::vector<int> device;  // CUDA device of each local communicator
  std::vector<ncclComm_t> comm;
  std::vector<cudaStream_t> stream;
  std::vector<std::unique_ptr<DeviceBuffer>> send, recv, wrong;
  bool aborted = false;
  // One process, n GPUs.
  Comms(const Nccl& lib, int ranks, int max_ctas) : nccl(&lib), n(ranks) {
    ncclUniqueId id;
    MOESIM_NCCL(lib, ncclGetUniqueId(&id));
    std::vector<int> devices(static_cast<std::size_t>(ranks));
    std::iota(devices.begin(), devices.end(), 0);
    init(devices, 0, max_ctas, id);
  }
  // Rank `rank` of `ranks` processes on CUDA device `dev`; `id` came from rank 0.
  Comms(const Nccl& lib, int ranks, int rank, int dev, int max_ctas, const ncclUniqueId& id) : nccl(&lib), n(ranks) {
    init({dev}, rank, max_ctas, id);
  }
  Comms(const Comms&) = delete;
  Comms& operator=(const Comms&) = delete;
  ~Comms() {
    for (std::size_t i = 0; i < comm.size(); ++i) {
      cudaSetDevice(device[i]);
      // After ncclCommAbort the communicator is gone and its stream may never drain.
      if (!aborted) {
        cudaStreamSynchronize(stream[i]);
        if (comm[i]) nccl->ncclCommDestroy(comm[i]);
      }
      if (stream[i]) cudaStreamDestroy(stream[i]);
    }
    send.clear();
    recv.clear();
    wrong.clear();
    cudaSetDevice(home);
  }
  int local() const { return static_cast<int>(comm.size()); }
  int rank_of(int i) const { return first_rank + i; }
  void sync() {
    for (int i = 0; i < local(); ++i) {
      MOESIM_CUDA(cudaSetDevice(device[static_cast<std::size_t>(i)]));
      MOESIM_CUDA(cudaStreamSynchronize(stream[static_cast<std::size_t>(i)]));
    }
    MOESIM_CUDA(cudaSetDevice(home));
  }
  // From another thread: unblocks kernels waiting on a dead peer (NCCL's documented recovery).
  void abort() {
    if (aborted) return;
    aborted = true;
    for (ncclComm_t c : comm)
      if (c) nccl->ncclCommAbort(c);
  }

 private:
  void init(const std::vector<int>& devices, int first, int max_ctas, const ncclUniqueId& id) {
    first_rank = first;
    device = devices;
    home = devices.front();
    comm.assign(devices.size(), nullptr);
    stream.assign(devices.size(), nullptr);
    for (std::size_t i = 0; i < devices.size(); ++i) {
      MOESIM_CUDA(cudaSetDevice(devices[i]));
      MOESIM_CUDA(cudaStreamCreateWithFlags(&stream[i], cudaStreamNonBlocking));
      send.push_back(std::make_unique<DeviceBuffer>());
      recv.push_back(std::make_unique<DeviceBuffer>());
      wrong.push_back(std::make_unique<DeviceBuffer>());
      wrong.back()->reserve(sizeof(unsigned long long));
    }
    const Nccl& lib = *nccl;
    if (devices.size() == 1 && max_ctas <= 0) {
      // One rank per process, NCCL's defaults: the plain multi-process call.
      MOESIM_CUDA(cudaSetDevice(devices[0]));
      MOESIM_NCCL(lib, ncclCommInitRank(&comm[0], n, id, first));
    } else {
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      if (max_ctas > 0) config.maxCTAs = max_ctas;
      MOESIM_NCCL(lib, ncclGroupStart());
      for (std::size_t i = 0; i < devices.size(); ++i) {
        MOESIM_CUDA(cudaSetDevice(devices[i]));
        MOESIM_NCCL(lib, ncclCommInitRankConfig(&comm[i], n, id, first + static_cast<int>(i), &config));
      }
      MOESIM_NCCL(lib, ncclGroupEnd());
    }
    MOESIM_CUDA(cudaSetDevice(home));
  }
};

// Elements rank r sends to rank p in an all-to-all of `elements` per rank.
std::vector<std::vector<std::size_t>> a2a_counts(const Traffic& t, int n, std::size_t elements) {
  std::vector<std::vector<std::size_t>> c(n, std::vector<std::size_t>(n, elements / n));
  if (t.traffic_matrix.size() != static_cast<std::size_t>(n) * n) return c;
  for (int r = 0; r < n; ++r) {
    double sum = 0.0;
    for (int p = 0; p < n; ++p) sum += t.traffic_matrix[static_cast<std::size_t>(r) * n + p];
    for (int p = 0; p < n; ++p)
      c[r][p] = sum > 0 ? static_cast<std::size_t>(static_cast<double>(elements) * t.traffic_matrix[static_cast<std::size_t>(r) * n + p] / sum) : 0;
  }
  return c;
}

}  // namespace

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(const DeviceRequest& request);
  ~CudaDevice() override;
  const DeviceInfo& info() const override { return info_; }
  std::vector<double> time_gemm(const GemmWork& work, const Timing& timing) override;
  CollectiveRun time_collective(const Traffic& traffic, const Timing& timing) override;
  std::vector<double> time_traffic(const Traffic& traffic, const Timing& timing) override;
  OverlapRun time_overlap(const GemmWork& work, const Traffic& traffic, const Timing& timing) override;
  ConcurrentRun time_concurrent(const GemmWork& work, const Traffic& traffic, const Timing& timing) override;
  PowerRun measure_power(const PowerState& state) override;
  void set_power_limit(double watts) override;
  void set_sm_clock_limit(double hertz) override;
  void abort_communication() override;

 private:
  struct Prepared {
    GemmOp op;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    std::size_t a_off = 0, b_off = 0, d_off = 0;
  };
  struct PreparedWork {
    std::vector<Prepared> ops;
    std::size_t set_bytes = 0;
    int sets = 1;
    std::vector<cudaGraphExec_t> graphs;  // one per set, grouped work only
    double flops = 0.0;
  };
  using Launch = std::function<void(int iteration)>;

  void prepare(PreparedWork& w, const GemmWork& work);
  void destroy(PreparedWork& w);
  void launch_work(PreparedWork& w, int iteration, cudaStream_t s);
  Launch traffic_launch(const Traffic& t, cudaStream_t& stream);
  Comms& comms(const Traffic& t);
  void launch_collective(Comms& c, const Traffic& t);
  // `shared`: the launches are collectives of a cluster run, so every rank must run as many: the probe
  // that sizes a sample is agreed (the largest over the ranks).
  std::vector<double> time_launches(const Launch& launch, const Timing& timing, cudaStream_t s, bool shared = false);
  bool cluster() const { return request_.cluster.world > 1; }
  double agree(double value) const { return cluster() && request_.cluster.max ? request_.cluster.max(value) : value; }
  float elapsed(cudaEvent_t a, cudaEvent_t b);
  void restore();

  DeviceRequest request_;
  DeviceInfo info_;
  CublasLt lt_;
  std::unique_ptr<Nccl> nccl_;
  Nvml nvml_;
  nvmlDevice_t nvml_device_ = nullptr;
  cublasLtHandle_t handle_ = nullptr;
  cudaStream_t s1_ = nullptr, s2_ = nullptr;
  cudaEvent_t ev_[8] = {};
  DeviceBuffer workspace_, gemm_pool_, src_, dst_;
  PinnedBuffer host_;
  std::size_t workspace_bytes_ = 64u << 20;
  std::map<std::pair<int, int>, std::unique_ptr<Comms>> comms_;
  std::mutex comms_mutex_;  // abort_communication runs on the watchdog's thread
  int device_ = 0;          // this process's GPU (its local rank in a cluster run, else 0)
  unsigned original_power_mw_ = 0;
  bool power_changed_ = false, clocks_changed_ = false;
  unsigned long long seed_ = 1;
};

CudaDevice::CudaDevice(const DeviceRequest& request) : request_(request) {
  int count = 0;
  MOESIM_CUDA(cudaGetDeviceCount(&count));
  if (count < request.gpus)
    throw common::RunError("--gpus " + std::to_string(request.gpus) + " asked for, but this machine has " +
                           std::to_string(count) + " GPU" + (count == 1 ? "" : "s"));
  if (request.cluster.world > 1) {
    // A process that sees one GPU (srun --gpus-per-task=1, CUDA_VISIBLE_DEVICES per rank) uses it;
    // one that sees the whole node takes the GPU of its local rank.
    device_ = count == 1 ? 0 : request.cluster.local_rank;
    if (device_ >= count)
      throw common::RunError("local rank " + std::to_string(request.cluster.local_rank) + " but this process sees " +
                             std::to_string(count) +
                             " GPUs: start at most one process per GPU on each node, or give "
                             "each process one GPU (CUDA_VISIBLE_DEVICES, srun --gpus-per-task=1)");
  }
  MOESIM_CUDA(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  MOESIM_CUDA(cudaGetDeviceProperties(&prop, device_));
  info_.name = prop.name;
  info_.index = device_;
  info_.gpu_count = request.gpus;
  info_.sm_count = prop.multiProcessorCount;
  info_.compute_capability = prop.major * 10 + prop.minor;
  info_.memory = static_cast<double>(prop.totalGlobalMem);
  info_.l2_bytes = static_cast<double>(prop.l2CacheSize);
  int clock_khz = 0, mem_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device_);
  cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device_);
  info_.max_sm_clock = clock_khz * 1e3;
  info_.max_mem_clock = mem_khz * 1e3;
  info_.fp8 = info_.compute_capability >= 89;
  char bus[32] = {};
  MOESIM_CUDA(cudaDeviceGetPCIBusId(bus, sizeof bus, device_));
  info_.pci_bus_id = bus;
  int rt = 0, drv = 0;
  MOESIM_CUDA(cudaRuntimeGetVersion(&rt));
  MOESIM_CUDA(cudaDriverGetVersion(&drv));
  info_.cuda_runtime = version_text(rt, 1000, 10);
  info_.cuda_driver_api = version_text(drv, 1000, 10);
  const std::size_t v = lt_.cublasLtGetVersion();
  info_.cublaslt = std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
  info_.cublaslt_path = lt_.lib.path();
  nccl_ = std::make_unique<Nccl>(request.gpus > 1 || request.cluster.world > 1);
  if (nccl_->lib.loaded()) {
    int nv = 0;
    MOESIM_NCCL(*nccl_, ncclGetVersion(&nv));
    info_.nccl = true;
    info_.nccl_version = std::to_string(nv / 10000) + "." + std::to_string((nv % 10000) / 100) + "." + std::to_string(nv % 100);
    info_.nccl_path = nccl_->lib.path();
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  info_.host = host;
  info_.build = build_description();
  if (nvml_.initialized && nvml_.nvmlDeviceGetHandleByPciBusId_v2(bus, &nvml_device_) == kNvmlSuccess) {
    info_.nvml = true;
    info_.nvml_path = nvml_.lib.path();
    char driver[96] = {};
    if (nvml_.nvmlSystemGetDriverVersion(driver, sizeof driver) == kNvmlSuccess) info_.driver = driver;
    unsigned x = 0, y = 0;
    if (nvml_.nvmlDeviceGetPowerManagementLimit(nvml_device_, &x) == kNvmlSuccess) info_.power_limit = x / 1e3;
    if (nvml_.nvmlDeviceGetPowerManagementDefaultLimit(nvml_device_, &x) == kNvmlSuccess) info_.default_power_limit = x / 1e3;
    if (nvml_.nvmlDeviceGetPowerManagementLimitConstraints(nvml_device_, &x, &y) == kNvmlSuccess) {
      info_.min_power_limit = x / 1e3;
      info_.max_power_limit = y / 1e3;
    }
    if (nvml_.nvmlDeviceGetMaxClockInfo(nvml_device_, kNvmlClockSm, &x) == kNvmlSuccess) info_.max_sm_clock = x * 1e6;
    if (nvml_.nvmlDeviceGetMaxClockInfo(nvml_device_, kNvmlClockMem, &x) == kNvmlSuccess) info_.max_mem_clock = x * 1e6;
    if (nvml_.nvmlDeviceGetCurrPcieLinkGeneration(nvml_device_, &x) == kNvmlSuccess) info_.pcie_generation = static_cast<int>(x);
    if (nvml_.nvmlDeviceGetCurrPcieLinkWidth(nvml_device_, &x) == kNvmlSuccess) info_.pcie_width = static_cast<int>(x);
  }
  if (info_.driver.empty()) info_.driver = "CUDA driver API " + info_.cuda_driver_api;
  MOESIM_CUBLAS(lt_, cublasLtCreate(&handle_));
  MOESIM_CUDA(cudaStreamCreateWithFlags(&s1_, cudaStreamNonBlocking));
  MOESIM_CUDA(cudaStreamCreateWithFlags(&s2_, cudaStreamNonBlocking));
  for (cudaEvent_t& e : ev_) MOESIM_CUDA(cudaEventCreate(&e));
  workspace_.reserve(workspace_bytes_);
}

void CudaDevice::restore() {
  if (power_changed_ && nvml_device_) nvml_.nvmlDeviceSetPowerManagementLimit(nvml_device_, original_power_mw_);
  if (clocks_changed_ && nvml_device_) nvml_.nvmlDeviceResetGpuLockedClocks(nvml_device_);
  power_changed_ = clocks_changed_ = false;
}

CudaDevice::~CudaDevice() {
  cudaDeviceSynchronize();
  restore();
  comms_.clear();
  for (cudaEvent_t e : ev_)
    if (e) cudaEventDestroy(e);
  if (s1_) cudaStreamDestroy(s1_);
  if (s2_) cudaStreamDestroy(s2_);
  if (handle_) lt_.cublasLtDestroy(handle_);
}

float CudaDevice::elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0.0f;
  MOESIM_CUDA(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

void CudaDevice::prepare(PreparedWork& w, const GemmWork& work) {
  w.flops = work_flops(work);
  std::size_t offset = 0;
  for (const GemmOp& op : work) {
    const DtypeInfo t = dtype_info(op.dtype);
    Prepared p;
    p.op = op;
    const std::uint64_t m = static_cast<std::uint64_t>(op.m), n = static_cast<std::uint64_t>(op.n),
                        k = static_cast<std::uint64_t>(op.k);
    // Column-major D[n, m] = W^T[n, k] X[k, m]: the "TN" layout every dtype (fp8 included) accepts.
    MOESIM_CUBLAS(lt_, cublasLtMatmulDescCreate(&p.desc, t.compute, CUDA_R_32F));
    const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    MOESIM_CUBLAS(lt_, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
    MOESIM_CUBLAS(lt_, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
    MOESIM_CUBLAS(lt_, cublasLtMatrixLayoutCreate(&p.a, t.ab, k, n, static_cast<std::int64_t>(k)));
    MOESIM_CUBLAS(lt_, cublasLtMatrixLayoutCreate(&p.b, t.ab, k, m, static_cast<std::int64_t>(k)));
    MOESIM_CUBLAS(lt_, cublasLtMatrixLayoutCreate(&p.c, t.cd, n, m, static_cast<std::int64_t>(n)));
    cublasLtMatmulPreference_t pref = nullptr;
    MOESIM_CUBLAS(lt_, cublasLtMatmulPreferenceCreate(&pref));
    MOESIM_CUBLAS(lt_, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &workspace_bytes_, sizeof workspace_bytes_));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        lt_.cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
    lt_.cublasLtMatmulPreferenceDestroy(pref);
    w.ops.push_back(p);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
      destroy(w);
      throw UnsupportedError("cuBLASLt has no algorithm for " + models::dtype_name(op.dtype) +
                             " m=" + std::to_string(op.m) + " n=" + std::to_string(op.n) +
                             " k=" + std::to_string(op.k) + " (" + lt_.cublasLtGetStatusString(st) + ")");
    }
    w.ops.back().algo = result.algo;
    w.ops.back().a_off = offset;
    offset += align256(k * n * element_size(t.eab));
    w.ops.back().b_off = offset;
    offset += align256(k * m * element_size(t.eab));
    w.ops.back().d_off = offset;
    offset += align256(n * m * element_size(t.ecd));
  }
  w.set_bytes = offset;
  // Rotate over enough copies that the inputs are not served from L2 between launches.
  std::size_t free_b = 0, total_b = 0;
  MOESIM_CUDA(cudaMemGetInfo(&free_b, &total_b));
  const double want = std::ceil(3.0 * info_.l2_bytes / static_cast<double>(std::max<std::size_t>(offset, 1)));
  w.sets = static_cast<int>(std::clamp(want, 1.0, 8.0));
  while (w.sets > 1 && static_cast<double>(w.sets) * static_cast<double>(offset) > 0.5 * static_cast<double>(free_b)) --w.sets;
  if (static_cast<double>(offset) > 0.8 * static_cast<double>(free_b))
    throw UnsupportedError("the GEMMs need " + std::to_string(offset >> 20) + " MiB, more than the GPU has free");
  gemm_pool_.reserve(offset * static_cast<std::size_t>(w.sets));
  for (int s = 0; s < w.sets; ++s)
    for (const Prepared& p : w.ops) {
      const DtypeInfo t = dtype_info(p.op.dtype);
      const std::size_t base = static_cast<std::size_t>(s) * offset;
      fill_random(gemm_pool_.at(base + p.a_off), static_cast<std::size_t>(p.op.k * p.op.n), t.eab, seed_++, s1_);
      fill_random(gemm_pool_.at(base + p.b_off), static_cast<std::size_t>(p.op.k * p.op.m), t.eab, seed_++, s1_);
    }
  MOESIM_CUDA(cudaGetLastError());
  if (w.ops.size() > 1) {
    // A grouped expert GEMM is issued as one graph launch, as MoE kernels are.
    std::vector<cudaGraphExec_t> execs;
    for (int s = 0; s < w.sets; ++s) {
      cudaGraph_t g = nullptr;
      MOESIM_CUDA(cudaStreamBeginCapture(s1_, cudaStreamCaptureModeThreadLocal));
      launch_work(w, s, s1_);  // w.graphs is still empty: records the matmuls themselves
      MOESIM_CUDA(cudaStreamEndCapture(s1_, &g));
      cudaGraphExec_t exec = nullptr;
      const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
      cudaGraphDestroy(g);
      if (e != cudaSuccess) {
        for (cudaGraphExec_t x : execs) cudaGraphExecDestroy(x);
        MOESIM_CUDA(e);
      }
      execs.push_back(exec);
    }
    w.graphs = std::move(execs);
  }
  MOESIM_CUDA(cudaStreamSynchronize(s1_));
}

void CudaDevice::destroy(PreparedWork& w) {
  for (Prepared& p : w.ops) {
    if (p.desc) lt_.cublasLtMatmulDescDestroy(p.desc);
    if (p.a) lt_.cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) lt_.cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) lt_.cublasLtMatrixLayoutDestroy(p.c);
  }
  for (cudaGraphExec_t g : w.graphs)
    if (g) cudaGraphExecDestroy(g);
  w.ops.clear();
  w.graphs.clear();
}

void CudaDevice::launch_work(PreparedWork& w, int iteration, cudaStream_t s) {
  const int set = iteration % w.sets;
  if (!w.graphs.empty()) {
    MOESIM_CUDA(cudaGraphLaunch(w.graphs[static_cast<std::size_t>(set)], s));
    return;
  }
  const float alpha = 1.0f, beta = 0.0f;
  const std::size_t base = static_cast<std::size_t>(set) * w.set_bytes;
  for (const Prepared& p : w.ops) {
    void* d = gemm_pool_.at(base + p.d_off);
    MOESIM_CUBLAS(lt_, cublasLtMatmul(handle_, p.desc, &alpha, gemm_pool_.at(base + p.a_off), p.a,
                                      gemm_pool_.at(base + p.b_off), p.b, &beta, d, p.c, d, p.c, &p.algo,
                                      workspace_.p, workspace_bytes_, s));
  }
}

std::vector<double> CudaDevice::time_launches(const Launch& launch, const Timing& timing, cudaStream_t s, bool shared) {
  int it = 0;
  for (int i = 0; i < timing.warmup; ++i) launch(it++);
  MOESIM_CUDA(cudaEventRecord(ev_[0], s));
  launch(it++);
  MOESIM_CUDA(cudaEventRecord(ev_[1], s));
  MOESIM_CUDA(cudaEventSynchronize(ev_[1]));
  double probe = std::max(1e-7, elapsed(ev_[0], ev_[1]) * 1e-3);
  if (shared) probe = agree(probe);
  const int inner = timing.inner > 0 ? timing.inner
                                     : static_cast<int>(std::clamp(std::ceil(timing.min_sample / probe), 1.0, 1000.0));
  std::vector<double> out;
  for (int r = 0; r < timing.repetitions; ++r) {
    MOESIM_CUDA(cudaEventRecord(ev_[0], s));
    for (int i = 0; i < inner; ++i) launch(it++);
    MOESIM_CUDA(cudaEventRecord(ev_[1], s));
    MOESIM_CUDA(cudaEventSynchronize(ev_[1]));
    out.push_back(elapsed(ev_[0], ev_[1]) * 1e-3 / inner);
  }
  MOESIM_CUDA(cudaGetLastError());
  return out;
}

std::vector<double> CudaDevice::time_gemm(const GemmWork& work, const Timing& timing) {
  PreparedWork w;
  prepare(w, work);
  try {
    std::vector<double> t = time_launches([&](int i) { launch_work(w, i, s1_); }, timing, s1_);
    destroy(w);
    return t;
  } catch (...) {
    destroy(w);
    throw;
  }
}

Comms& CudaDevice::comms(const Traffic& t) {
  if (!nccl_ || !nccl_->lib.loaded()) throw UnsupportedError(nccl_ ? nccl_->lib.failure() : "NCCL not loaded");
  const int ranks = cluster() ? request_.cluster.world : std::max(t.ranks, info_.gpu_count);
  {
    std::lock_guard<std::mutex> lock(comms_mutex_);
    auto it = comms_.find({ranks, t.ctas});
    if (it != comms_.end()) return *it->second;
  }
  std::unique_ptr<Comms> c;
  if (cluster()) {
    // Every communicator needs its own id: rank 0 makes it, the launcher's connections carry it.
    ncclUniqueId id;
    std::string bytes;
    if (request_.cluster.rank == 0) {
      MOESIM_NCCL(*nccl_, ncclGetUniqueId(&id));
      bytes.assign(reinterpret_cast<const char*>(&id), sizeof id);
    }
    if (!request_.cluster.broadcast) throw common::RunError("a cluster run without a way to exchange NCCL's unique id");
    bytes = request_.cluster.broadcast(bytes);
    if (bytes.size() != sizeof id)
      throw common::RunError("rank 0 sent an NCCL unique id of " + std::to_string(bytes.size()) + " bytes, expected " +
                             std::to_string(sizeof id));
    std::memcpy(&id, bytes.data(), sizeof id);
    c = std::make_unique<Comms>(*nccl_, ranks, request_.cluster.rank, device_, t.ctas, id);
  } else {
    c = std::make_unique<Comms>(*nccl_, ranks, t.ctas);
  }
  std::lock_guard<std::mutex> lock(comms_mutex_);
  auto& slot = comms_[{ranks, t.ctas}];
  slot = std::move(c);
  return *slot;
}

void CudaDevice::abort_communication() {
  std::lock_guard<std::mutex> lock(comms_mutex_);
  for (auto& [key, c] : comms_) c->abort();
}

void CudaDevice::launch_collective(Comms& c, const Traffic& t) {
  const Nccl& nc = *nccl_;
  const std::size_t elements = static_cast<std::size_t>(t.bytes) / 4;
  const int n = c.n;
  MOESIM_NCCL(nc, ncclGroupStart());
  for (int i = 0; i < c.local(); ++i) {
    const int r = c.rank_of(i);  // the global rank
    MOESIM_CUDA(cudaSetDevice(c.device[i]));
    float* send = reinterpret_cast<float*>(c.send[i]->p);
    float* recv = reinterpret_cast<float*>(c.recv[i]->p);
    if (t.op == models::CollectiveOp::kAllReduce) {
      MOESIM_NCCL(nc, ncclAllReduce(send, recv, elements, ncclFloat, ncclSum, c.comm[i], c.stream[i]));
    } else if (t.op == models::CollectiveOp::kAllGather) {
      MOESIM_NCCL(nc, ncclAllGather(send, recv, elements / n, ncclFloat, c.comm[i], c.stream[i]));
    } else if (t.op == models::CollectiveOp::kReduceScatter) {
      MOESIM_NCCL(nc, ncclReduceScatter(send, recv, elements / n, ncclFloat, ncclSum, c.comm[i], c.stream[i]));
    } else if (t.op == models::CollectiveOp::kAllToAll) {
      const auto counts = a2a_counts(t, n, elements);
      std::size_t soff = 0, roff = 0;
      for (int p = 0; p < n; ++p) {
        MOESIM_NCCL(nc, ncclSend(send + soff, counts[r][p], ncclFloat, p, c.comm[i], c.stream[i]));
        MOESIM_NCCL(nc, ncclRecv(recv + roff, counts[p][r], ncclFloat, p, c.comm[i], c.stream[i]));
        soff += counts[r][p];
        roff += counts[p][r];
      }
    } else if (t.op == models::CollectiveOp::kSendRecv) {
      // Between rank 0 and t.peer (the next GPU of the node, or a GPU of another node).
      if (r == 0 || r == t.peer) {
        const int other = r == 0 ? t.peer : 0;
        MOESIM_NCCL(nc, ncclSend(send, elements, ncclFloat, other, c.comm[i], c.stream[i]));
        MOESIM_NCCL(nc, ncclRecv(recv, elements, ncclFloat, other, c.comm[i], c.stream[i]));
      }
    } else {
      throw common::UsageError("NCCL traffic without a collective op");
    }
  }
  MOESIM_NCCL(nc, ncclGroupEnd());
  MOESIM_CUDA(cudaSetDevice(c.home));
}

CollectiveRun CudaDevice::time_collective(const Traffic& t, const Timing& timing) {
  Comms& c = comms(t);
  const int n = c.n;
  const std::size_t elements = static_cast<std::size_t>(t.bytes) / 4;
  for (int i = 0; i < c.local(); ++i) {
    MOESIM_CUDA(cudaSetDevice(c.device[i]));
    c.send[i]->reserve(std::max<std::size_t>(elements * 4, 256));
    c.recv[i]->reserve(std::max<std::size_t>(elements * 4 * static_cast<std::size_t>(n), 256));
    fill_pattern(reinterpret_cast<float*>(c.send[i]->p), elements, c.rank_of(i), 0, c.stream[i]);
  }
  c.sync();
  for (int i = 0; i < timing.warmup; ++i) launch_collective(c, t);
  c.sync();
  const int iters = std::max(1, timing.inner);
  CollectiveRun run;
  for (int rep = 0; rep < timing.repetitions; ++rep) {
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) launch_collective(c, t);
    c.sync();
    run.times.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / iters);
  }
  // Correctness (nccl-tests' #wrong): one more run on fresh patterns, every element compared.
  for (int i = 0; i < c.local(); ++i) {
    MOESIM_CUDA(cudaSetDevice(c.device[i]));
    fill_pattern(reinterpret_cast<float*>(c.send[i]->p), elements, c.rank_of(i), 0, c.stream[i]);
    MOESIM_CUDA(cudaMemsetAsync(c.recv[i]->p, 0, c.recv[i]->bytes, c.stream[i]));
    MOESIM_CUDA(cudaMemsetAsync(c.wrong[i]->p, 0, sizeof(unsigned long long), c.stream[i]));
  }
  launch_collective(c, t);
  const auto counts = a2a_counts(t, n, elements);
  const std::size_t chunk = elements / n;
  for (int i = 0; i < c.local(); ++i) {
    const int r = c.rank_of(i);
    MOESIM_CUDA(cudaSetDevice(c.device[i]));
    const float* recv = reinterpret_cast<const float*>(c.recv[i]->p);
    auto* wrong = reinterpret_cast<unsigned long long*>(c.wrong[i]->p);
    if (t.op == models::CollectiveOp::kAllReduce) {
      count_wrong(recv, elements, 0, 0, n, wrong, c.stream[i]);
    } else if (t.op == models::CollectiveOp::kReduceScatter) {
      count_wrong(recv, chunk, 0, static_cast<std::size_t>(r) * chunk, n, wrong, c.stream[i]);
    } else if (t.op == models::CollectiveOp::kAllGather) {
      for (int p = 0; p < n; ++p)
        count_wrong(recv + static_cast<std::size_t>(p) * chunk, chunk, p, 0, 0, wrong, c.stream[i]);
    } else if (t.op == models::CollectiveOp::kAllToAll) {
      std::size_t roff = 0;
      for (int p = 0; p < n; ++p) {
        std::size_t soff = 0;
        for (int q = 0; q < r; ++q) soff += counts[p][q];
        count_wrong(recv + roff, counts[p][r], p, soff, 0, wrong, c.stream[i]);
        roff += counts[p][r];
      }
    } else if (t.op == models::CollectiveOp::kSendRecv && (r == 0 || r == t.peer)) {
      count_wrong(recv, elements, r == 0 ? t.peer : 0, 0, 0, wrong, c.stream[i]);
    }
  }
  c.sync();
  for (int i = 0; i < c.local(); ++i) {
    unsigned long long w = 0;
    MOESIM_CUDA(cudaSetDevice(c.device[i]));
    MOESIM_CUDA(cudaMemcpy(&w, c.wrong[i]->p, sizeof w, cudaMemcpyDeviceToHost));
    run.wrong += static_cast<long>(w);
  }
  MOESIM_CUDA(cudaSetDevice(c.home));
  return run;
}

CudaDevice::Launch CudaDevice::traffic_launch(const Traffic& t, cudaStream_t& stream) {
  const std::size_t bytes = std::max<std::size_t>(static_cast<std::size_t>(t.bytes) / 16 * 16, 16);
  if (t.kind == "nccl") {
    Comms& c = comms(t);
    const std::size_t elements = bytes / 4;
    for (int i = 0; i < c.local(); ++i) {
      MOESIM_CUDA(cudaSetDevice(c.device[i]));
      c.send[i]->reserve(elements * 4);
      c.recv[i]->reserve(elements * 4 * static_cast<std::size_t>(c.n));
      fill_pattern(reinterpret_cast<float*>(c.send[i]->p), elements, c.rank_of(i), 0, c.stream[i]);
    }
    c.sync();
    stream = c.stream[0];
    return [this, &c, t](int) { launch_collective(c, t); };
  }
  if (src_.reserve(bytes)) {
    fill_random(src_.p, bytes / 4, ElementType::kF32, seed_++, s2_);
    MOESIM_CUDA(cudaStreamSynchronize(s2_));
  }
  stream = s2_;
  if (t.kind == "copy_kernel") {
    dst_.reserve(bytes);
    const int ctas = t.ctas > 0 ? t.ctas : 4 * info_.sm_count;
    return [this, bytes, ctas](int) { copy_kernel(dst_.p, src_.p, bytes, ctas, s2_); };
  }
  if (t.kind == "copy_engine") {
    host_.reserve(bytes);
    return [this, bytes](int) { MOESIM_CUDA(cudaMemcpyAsync(host_.p, src_.p, bytes, cudaMemcpyDeviceToHost, s2_)); };
  }
  throw common::UsageError("unknown traffic kind \"" + t.kind + "\"");
}

std::vector<double> CudaDevice::time_traffic(const Traffic& t, const Timing& timing) {
  cudaStream_t s = nullptr;
  const Launch launch = traffic_launch(t, s);
  std::vector<double> out = time_launches(launch, timing, s, t.kind == "nccl" && cluster());
  if (t.kind == "copy_engine" && nvml_device_) {
    unsigned x = 0;  // the link trains down when idle: read it right after traffic
    if (nvml_.nvmlDeviceGetCurrPcieLinkGeneration(nvml_device_, &x) == kNvmlSuccess) info_.pcie_generation = static_cast<int>(x);
    if (nvml_.nvmlDeviceGetCurrPcieLinkWidth(nvml_device_, &x) == kNvmlSuccess) info_.pcie_width = static_cast<int>(x);
  }
  return out;
}

OverlapRun CudaDevice::time_overlap(const GemmWork& work, const Traffic& t, const Timing& timing) {
  PreparedWork w;
  prepare(w, work);
  OverlapRun run;
  try {
    cudaStream_t cs = nullptr;
    const Launch comm = traffic_launch(t, cs);
    const Launch gemm = [&](int i) { launch_work(w, i, s1_); };
    const bool shared = t.kind == "nccl" && cluster();
    run.gemm_alone = time_launches(gemm, timing, s1_);
    run.comm_alone = time_launches(comm, timing, cs, shared);
    double tg = common::percentile(run.gemm_alone, 0.5), tc = common::percentile(run.comm_alone, 0.5);
    if (shared) {
      // Every rank must launch as many collectives: size the batches from the slowest rank's times.
      tg = agree(tg);
      tc = agree(tc);
    }
    auto inner_for = [&](double op) {
      return timing.inner > 0 ? timing.inner : static_cast<int>(std::clamp(std::ceil(timing.min_sample / op), 1.0, 1000.0));
    };
    const int ig = inner_for(tg), ic = inner_for(tc);
    const int cover_c = static_cast<int>(std::min(100000.0, std::ceil(1.3 * ig * tg / tc) + 2));
    const int cover_g = static_cast<int>(std::min(100000.0, std::ceil(1.3 * ic * tc / tg) + 2));
    run.gemm_overlap = run.comm_overlap = 1.0;
    int it = 0;
    for (int rep = 0; rep < timing.repetitions; ++rep) {
      // The GEMM while the traffic runs throughout.
      MOESIM_CUDA(cudaEventRecord(ev_[2], cs));
      comm(it);
      MOESIM_CUDA(cudaEventRecord(ev_[4], cs));
      for (int i = 1; i < cover_c; ++i) comm(it);
      MOESIM_CUDA(cudaEventRecord(ev_[3], cs));
      MOESIM_CUDA(cudaStreamWaitEvent(s1_, ev_[4], 0));
      MOESIM_CUDA(cudaEventRecord(ev_[0], s1_));
      for (int i = 0; i < ig; ++i) gemm(it++);
      MOESIM_CUDA(cudaEventRecord(ev_[1], s1_));
      MOESIM_CUDA(cudaEventSynchronize(ev_[1]));
      MOESIM_CUDA(cudaEventSynchronize(ev_[3]));
      run.gemm_overlapped.push_back(elapsed(ev_[0], ev_[1]) * 1e-3 / ig);
      run.gemm_overlap = std::min(run.gemm_overlap,
                                  interval_overlap(elapsed(ev_[2], ev_[0]), elapsed(ev_[2], ev_[1]), 0.0, elapsed(ev_[2], ev_[3])));
      // The traffic while GEMMs run throughout.
      MOESIM_CUDA(cudaEventRecord(ev_[0], s1_));
      gemm(it++);
      MOESIM_CUDA(cudaEventRecord(ev_[4], s1_));
      for (int i = 1; i < cover_g; ++i) gemm(it++);
      MOESIM_CUDA(cudaEventRecord(ev_[1], s1_));
      MOESIM_CUDA(cudaStreamWaitEvent(cs, ev_[4], 0));
      MOESIM_CUDA(cudaEventRecord(ev_[2], cs));
      for (int i = 0; i < ic; ++i) comm(it);
      MOESIM_CUDA(cudaEventRecord(ev_[3], cs));
      MOESIM_CUDA(cudaEventSynchronize(ev_[1]));
      MOESIM_CUDA(cudaEventSynchronize(ev_[3]));
      run.comm_overlapped.push_back(elapsed(ev_[2], ev_[3]) * 1e-3 / ic);
      run.comm_overlap = std::min(run.comm_overlap,
                                  interval_overlap(elapsed(ev_[0], ev_[2]), elapsed(ev_[0], ev_[3]), 0.0, elapsed(ev_[0], ev_[1])));
    }
    MOESIM_CUDA(cudaGetLastError());
  } catch (...) {
    destroy(w);
    throw;
  }
  destroy(w);
  return run;
}

ConcurrentRun CudaDevice::time_concurrent(const GemmWork& work, const Traffic& t, const Timing& timing) {
  PreparedWork w;
  prepare(w, work);
  ConcurrentRun run;
  try {
    cudaStream_t cs = nullptr;
    const Launch comm = traffic_launch(t, cs);
    // A cluster run's collectives must be launched as often on every rank: no sample is retried.
    const bool shared = t.kind == "nccl" && cluster();
    cudaEvent_t start = ev_[5], gemm_end = ev_[6], comm_end = ev_[7];
    // Both streams wait behind a spinning kernel while the host enqueues the pair; if the spin ended
    // before the host was done, the pair did not start together: the sample is taken again with a
    // longer spin.
    unsigned long long hold_ns = shared ? 1000000ull : 100000ull;
    int it = 0;
    auto pair = [&](bool concurrent) {
      for (int attempt = 0;; ++attempt) {
        hold_kernel(hold_ns, s1_);
        MOESIM_CUDA(cudaEventRecord(start, s1_));
        if (concurrent) {
          MOESIM_CUDA(cudaStreamWaitEvent(cs, start, 0));
          comm(it);
          MOESIM_CUDA(cudaEventRecord(comm_end, cs));
          launch_work(w, it, s1_);
          MOESIM_CUDA(cudaEventRecord(gemm_end, s1_));
        } else {
          launch_work(w, it, s1_);
          MOESIM_CUDA(cudaEventRecord(gemm_end, s1_));
          MOESIM_CUDA(cudaStreamWaitEvent(cs, gemm_end, 0));
          comm(it);
          MOESIM_CUDA(cudaEventRecord(comm_end, cs));
        }
        ++it;
        const cudaError_t q = cudaEventQuery(start);
        const bool held = q == cudaErrorNotReady;
        if (q != cudaSuccess && q != cudaErrorNotReady) MOESIM_CUDA(q);
        MOESIM_CUDA(cudaEventSynchronize(gemm_end));
        MOESIM_CUDA(cudaEventSynchronize(comm_end));
        if (held || shared) return;
        if (attempt >= 6)
          throw common::RunError("the GEMMs and the traffic could not be started together: the host took longer "
                                 "than " + std::to_string(hold_ns / 1000) + " us to enqueue them");
        hold_ns *= 2;
      }
    };
    for (int i = 0; i < timing.warmup; ++i) {
      pair(true);
      pair(false);
    }
    for (int rep = 0; rep < timing.repetitions; ++rep) {
      pair(true);
      const double g = elapsed(start, gemm_end) * 1e-3, c = elapsed(start, comm_end) * 1e-3;
      run.gemm.push_back(g);
      run.comm.push_back(c);
      run.span.push_back(std::max(g, c));
      pair(false);
      run.gemm_alone.push_back(elapsed(start, gemm_end) * 1e-3);
      run.comm_alone.push_back(elapsed(gemm_end, comm_end) * 1e-3);
      run.sequential.push_back(elapsed(start, comm_end) * 1e-3);
    }
    MOESIM_CUDA(cudaGetLastError());
  } catch (...) {
    destroy(w);
    throw;
  }
  destroy(w);
  return run;
}

PowerRun CudaDevice::measure_power(const PowerState& state) {
  if (!nvml_device_) throw UnsupportedError("NVML is not available: " + nvml_.lib.failure());
  PreparedWork w;
  if (!state.gemm.empty()) prepare(w, state.gemm);
  PowerRun run;
  try {
    cudaStream_t cs = s2_;
    Launch comm;
    if (!state.traffic.kind.empty()) comm = traffic_launch(state.traffic, cs);
    // Chunks of about 20 ms of work keep the GPU busy while NVML is sampled between them.
    auto chunk_of = [&](const Launch& l, cudaStream_t s) {
      MOESIM_CUDA(cudaEventRecord(ev_[0], s));
      l(0);
      MOESIM_CUDA(cudaEventRecord(ev_[1], s));
      MOESIM_CUDA(cudaEventSynchronize(ev_[1]));
      return static_cast<int>(std::clamp(std::ceil(20.0 / std::max(1e-4f, elapsed(ev_[0], ev_[1]))), 1.0, 100000.0));
    };
    const Launch gemm = [&](int i) { launch_work(w, i, s1_); };
    const int gchunk = w.ops.empty() ? 0 : chunk_of(gemm, s1_);
    int cchunk = comm ? chunk_of(comm, cs) : 0;
    // A cluster run's collectives must be launched as often on every rank: agree on the chunk and on a
    // fixed number of rounds (about 20 ms of GEMMs and 20 ms of collectives each) instead of a clock.
    const bool shared = comm && state.traffic.kind == "nccl" && cluster();
    int rounds = 0;
    if (shared) {
      cchunk = static_cast<int>(agree(cchunk));
      rounds = static_cast<int>(agree(std::ceil(state.seconds / (gchunk > 0 ? 0.04 : 0.02))));
    }
    MOESIM_CUDA(cudaDeviceSynchronize());
    unsigned long long e0 = 0, e1 = 0;
    run.energy_counter = nvml_.nvmlDeviceGetTotalEnergyConsumption(nvml_device_, &e0) == kNvmlSuccess;
    const auto t0 = Clock::now();
    double psum = 0.0, smsum = 0.0, memsum = 0.0, launched = 0.0;
    int samples = 0, it = 0;
    auto last = t0;
    double integrated = 0.0;
    for (int round = 0;
         shared ? round < rounds : std::chrono::duration<double>(Clock::now() - t0).count() < state.seconds; ++round) {
      for (int i = 0; i < gchunk; ++i) gemm(it++);
      launched += gchunk;
      for (int i = 0; i < cchunk; ++i) comm(it);
      if (gchunk == 0 && cchunk == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      unsigned mw = 0, sm = 0, mem = 0;
      if (nvml_.nvmlDeviceGetPowerUsage(nvml_device_, &mw) == kNvmlSuccess) {
        const auto now = Clock::now();
        integrated += mw / 1e3 * std::chrono::duration<double>(now - last).count();
        last = now;
        psum += mw / 1e3;
        ++samples;
      }
      if (nvml_.nvmlDeviceGetClockInfo(nvml_device_, kNvmlClockSm, &sm) == kNvmlSuccess) smsum += sm * 1e6;
      if (nvml_.nvmlDeviceGetClockInfo(nvml_device_, kNvmlClockMem, &mem) == kNvmlSuccess) memsum += mem * 1e6;
      MOESIM_CUDA(cudaStreamSynchronize(s1_));
      MOESIM_CUDA(cudaStreamSynchronize(cs));
    }
    run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (run.energy_counter && nvml_.nvmlDeviceGetTotalEnergyConsumption(nvml_device_, &e1) == kNvmlSuccess && e1 > e0) {
      run.energy = static_cast<double>(e1 - e0) / 1e3;
    } else {
      run.energy_counter = false;
      run.energy = integrated;
    }
    run.average_power = run.seconds > 0 ? run.energy / run.seconds : 0.0;
    if (samples > 0) {
      run.sampled_power = psum / samples;
      run.sm_clock = smsum / samples;
      run.mem_clock = memsum / samples;
    }
    unsigned temp = 0;
    if (nvml_.nvmlDeviceGetTemperature(nvml_device_, kNvmlTemperatureGpu, &temp) == kNvmlSuccess) run.temperature = temp;
    run.work_rate = run.seconds > 0 ? launched * w.flops / run.seconds : 0.0;
  } catch (...) {
    destroy(w);
    throw;
  }
  destroy(w);
  return run;
}

void CudaDevice::set_power_limit(double watts) {
  if (!request_.allow_set_power_limit) throw common::UsageError("changing the power limit needs --allow-set-power-limit");
  if (!nvml_device_) throw UnsupportedError("NVML is not available");
  if (watts <= 0.0) {
    restore();
    return;
  }
  if (!power_changed_) MOESIM_NVML(nvml_, nvmlDeviceGetPowerManagementLimit(nvml_device_, &original_power_mw_));
  power_changed_ = true;
  MOESIM_NVML(nvml_, nvmlDeviceSetPowerManagementLimit(nvml_device_, static_cast<unsigned>(watts * 1e3)));
}

void CudaDevice::set_sm_clock_limit(double hertz) {
  if (!request_.allow_set_clocks) throw common::UsageError("locking clocks needs --allow-set-clocks");
  if (!nvml_device_) throw UnsupportedError("NVML is not available");
  if (hertz <= 0.0) {
    if (clocks_changed_) MOESIM_NVML(nvml_, nvmlDeviceResetGpuLockedClocks(nvml_device_));
    clocks_changed_ = false;
    return;
  }
  clocks_changed_ = true;
  const unsigned mhz = static_cast<unsigned>(hertz / 1e6);
  MOESIM_NVML(nvml_, nvmlDeviceSetGpuLockedClocks(nvml_device_, mhz, mhz));
}

namespace {

// The oldest driver the statically linked runtime accepts: NVIDIA's minor-version compatibility
// table gives >= 525 for every CUDA 12.x and >= 580 for 13.x.
std::string min_driver() {
  constexpr int major = CUDART_VERSION / 1000;
  return major >= 13 ? ">= 580" : major == 12 ? ">= 525" : "the toolkit's own minimum";
}

// The no-GPU cases: the runtime's own words plus what they mean here.
[[noreturn]] void no_gpu(cudaError_t e) {
  std::string why = cudaGetErrorString(e);
  if (e == cudaErrorInsufficientDriver)
    why += " (no NVIDIA driver, or one older than this CUDA " + std::to_string(CUDART_VERSION / 1000) + "." +
           std::to_string(CUDART_VERSION % 1000 / 10) + " runtime needs: " + min_driver() +
           "; or rebuild with the cluster's CUDA 12 toolkit, docs/calibration.md)";
  else if (e == cudaErrorNoDevice)
    why += " (the driver sees no GPU)";
  throw NoGpuError(why + "; nothing was measured and no file was written");
}

int device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) no_gpu(e);
  if (n == 0) no_gpu(cudaErrorNoDevice);
  return n;
}

}  // namespace
}  // namespace cuda

// What this binary needs on the GPU machine, printed by --version, --help, the raw JSON and a run's header:
// the toolkit it was built with (the statically linked runtime's version sets the oldest driver), the
// GPU architectures compiled in, and the glibc of the build host (the oldest glibc it runs with).
std::string build_description() {
  return "CUDA " + std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) +
         " (nvcc " + std::to_string(__CUDACC_VER_MAJOR__) + "." + std::to_string(__CUDACC_VER_MINOR__) + "." +
         std::to_string(__CUDACC_VER_BUILD__) + ", architectures " + MOESIM_CUDA_ARCHS + ", glibc " +
         std::to_string(__GLIBC__) + "." + std::to_string(__GLIBC_MINOR__) + "; needs an NVIDIA driver " +
         cuda::min_driver() + "; runtime linked statically; cuBLASLt " + std::to_string(CUBLAS_VER_MAJOR) +
         " (or another major), NCCL and NVML loaded at run time)";
}

std::vector<std::string> list_devices() {
  const int n = cuda::device_count();
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    MOESIM_CUDA(cudaGetDeviceProperties(&p, i));
    char bus[32] = {};
    MOESIM_CUDA(cudaDeviceGetPCIBusId(bus, sizeof bus, i));
    char line[512];
    std::snprintf(line, sizeof line, "GPU %d: %s [%s], compute capability %d.%d, %d SMs, %.1f GiB, L2 %.0f MiB", i, p.name,
                  bus, p.major, p.minor, p.multiProcessorCount, static_cast<double>(p.totalGlobalMem) / 1073741824.0,
                  p.l2CacheSize / 1048576.0);
    out.emplace_back(line);
  }
  return out;
}

std::unique_ptr<Device> open_device(const DeviceRequest& request) {
  cuda::device_count();
  return std::make_unique<cuda::CudaDevice>(request);
}

}  // namespace moesim::calibrate
