// Checks for every CUDA, cuBLASLt, NCCL and NVML call: a failure throws RunError naming the file and
// line of the call, the call itself and the library's message.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "calibrate/cuda/libs.hpp"

#define MOESIM_CUDA(call)                                                                              \
  do {                                                                                                 \
    const cudaError_t moesim_e = (call);                                                               \
    if (moesim_e != cudaSuccess)                                                                       \
      ::moesim::calibrate::cuda::fail(__FILE__, __LINE__, #call, cudaGetErrorString(moesim_e));        \
  } while (0)

#define MOESIM_CUBLAS(lt, call)                                                                        \
  do {                                                                                                 \
    const cublasStatus_t moesim_s = (lt).call;                                                         \
    if (moesim_s != CUBLAS_STATUS_SUCCESS)                                                             \
      ::moesim::calibrate::cuda::fail(__FILE__, __LINE__, #call, (lt).cublasLtGetStatusString(moesim_s)); \
  } while (0)

#define MOESIM_NCCL(nc, call)                                                                          \
  do {                                                                                                 \
    const ncclResult_t moesim_r = (nc).call;                                                           \
    if (moesim_r != ncclSuccess)                                                                       \
      ::moesim::calibrate::cuda::fail(__FILE__, __LINE__, #call, (nc).ncclGetErrorString(moesim_r));   \
  } while (0)

#define MOESIM_NVML(nv, call)                                                                          \
  do {                                                                                                 \
    const ::moesim::calibrate::cuda::nvmlReturn_t moesim_n = (nv).call;                                \
    if (moesim_n != ::moesim::calibrate::cuda::kNvmlSuccess)                                           \
      ::moesim::calibrate::cuda::fail(__FILE__, __LINE__, #call, (nv).nvmlErrorString(moesim_n));      \
  } while (0)
