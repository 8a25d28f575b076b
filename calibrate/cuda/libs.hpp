// cuBLASLt, NCCL and NVML loaded at run time (dlopen), so that the executable needs none of them at
// link or start time: the GPU machine's copies may live in its CUDA toolkit or in PyTorch's nvidia-*
// wheels, and NCCL is too large to carry. Function types come from the toolkit's own headers (NVML,
// which has no header here, is declared below). Each loader throws RunError listing where it looked.
#pragma once

#include <cublasLt.h>
#include <nccl.h>

#include <string>
#include <vector>

namespace moesim::calibrate::cuda {

// A dlopen handle, closed on destruction.
class Library {
 public:
  Library() = default;
  // Tries $env_var (a path) first, then each candidate in order: a soname through the loader's search,
  // a path, or a path with wildcards (each match).
  Library(const std::string& what, const std::string& env_var, const std::vector<std::string>& candidates,
          bool required);
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library();
  bool loaded() const { return handle_ != nullptr; }
  const std::string& path() const { return path_; }
  const std::string& failure() const { return failure_; }
  void* symbol(const char* name) const;  // RunError when missing

 private:
  void* handle_ = nullptr;
  std::string what_, path_, failure_;
};

#define MOESIM_FN(name) decltype(&::name) name = nullptr

struct CublasLt {
  Library lib;
  MOESIM_FN(cublasLtCreate);
  MOESIM_FN(cublasLtDestroy);
  MOESIM_FN(cublasLtGetVersion);
  MOESIM_FN(cublasLtGetStatusString);
  MOESIM_FN(cublasLtMatmulDescCreate);
  MOESIM_FN(cublasLtMatmulDescDestroy);
  MOESIM_FN(cublasLtMatmulDescSetAttribute);
  MOESIM_FN(cublasLtMatrixLayoutCreate);
  MOESIM_FN(cublasLtMatrixLayoutDestroy);
  MOESIM_FN(cublasLtMatmulPreferenceCreate);
  MOESIM_FN(cublasLtMatmulPreferenceDestroy);
  MOESIM_FN(cublasLtMatmulPreferenceSetAttribute);
  MOESIM_FN(cublasLtMatmulAlgoGetHeuristic);
  MOESIM_FN(cublasLtMatmul);
  CublasLt();
};

struct Nccl {
  Library lib;
  MOESIM_FN(ncclGetVersion);
  MOESIM_FN(ncclGetUniqueId);
  MOESIM_FN(ncclCommInitRank);
  MOESIM_FN(ncclCommInitRankConfig);
  MOESIM_FN(ncclCommDestroy);
  MOESIM_FN(ncclCommAbort);
  MOESIM_FN(ncclGetErrorString);
  MOESIM_FN(ncclGroupStart);
  MOESIM_FN(ncclGroupEnd);
  MOESIM_FN(ncclAllReduce);
  MOESIM_FN(ncclAllGather);
  MOESIM_FN(ncclReduceScatter);
  MOESIM_FN(ncclSend);
  MOESIM_FN(ncclRecv);
  explicit Nccl(bool required);
};

#undef MOESIM_FN

// The part of NVML's C API this tool uses (nvml.h is not installed here; these match its ABI).
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlReturn_t = int;
inline constexpr nvmlReturn_t kNvmlSuccess = 0;
inline constexpr int kNvmlClockSm = 1;
inline constexpr int kNvmlClockMem = 2;
inline constexpr int kNvmlTemperatureGpu = 0;

struct Nvml {
  Library lib;
  nvmlReturn_t (*nvmlInit_v2)() = nullptr;
  nvmlReturn_t (*nvmlShutdown)() = nullptr;
  const char* (*nvmlErrorString)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*nvmlSystemGetDriverVersion)(char*, unsigned) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetHandleByPciBusId_v2)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetTotalEnergyConsumption)(nvmlDevice_t, unsigned long long*) = nullptr;  // mJ
  nvmlReturn_t (*nvmlDeviceGetPowerUsage)(nvmlDevice_t, unsigned*) = nullptr;                        // mW
  nvmlReturn_t (*nvmlDeviceGetClockInfo)(nvmlDevice_t, int, unsigned*) = nullptr;                    // MHz
  nvmlReturn_t (*nvmlDeviceGetMaxClockInfo)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetTemperature)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetPowerManagementLimit)(nvmlDevice_t, unsigned*) = nullptr;  // mW
  nvmlReturn_t (*nvmlDeviceGetPowerManagementDefaultLimit)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetPowerManagementLimitConstraints)(nvmlDevice_t, unsigned*, unsigned*) = nullptr;
  nvmlReturn_t (*nvmlDeviceSetPowerManagementLimit)(nvmlDevice_t, unsigned) = nullptr;
  nvmlReturn_t (*nvmlDeviceSetGpuLockedClocks)(nvmlDevice_t, unsigned, unsigned) = nullptr;
  nvmlReturn_t (*nvmlDeviceResetGpuLockedClocks)(nvmlDevice_t) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetCurrPcieLinkGeneration)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetCurrPcieLinkWidth)(nvmlDevice_t, unsigned*) = nullptr;
  bool initialized = false;
  Nvml();
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
};

// Throws RunError "file:line: call failed: message" (the CHECK macros in check.hpp use these).
[[noreturn]] void fail(const char* file, int line, const std::string& call, const std::string& message);

}  // namespace moesim::calibrate::cuda
