#include "calibrate/cuda/kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

namespace moesim::calibrate::cuda {

namespace {

__device__ float random_value(unsigned long long seed, unsigned long long i) {
  unsigned long long x = seed ^ (i * 0x9E3779B97F4A7C15ull);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  const float u = static_cast<float>(x >> 40) / 16777216.0f;  // [0, 1)
  const float mag = 0.01f + 0.99f * u;
  return (x & 1ull) ? mag : -mag;
}

template <typename T>
__global__ void fill_kernel(T* p, std::size_t n, unsigned long long seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<T>(random_value(seed, i));
}

__global__ void copy16(uint4* dst, const uint4* src, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void hold(unsigned long long ns) {
  unsigned long long t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

__host__ __device__ float pattern(int rank, std::size_t i) {
  return static_cast<float>(static_cast<int>((rank * 131u + i * 7u + (i >> 10)) % 17u) - 8);
}

__global__ void pattern_kernel(float* p, std::size_t n, int rank, std::size_t offset) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p[i] = pattern(rank, offset + i);
}

__global__ void wrong_kernel(const float* p, std::size_t n, int rank, std::size_t offset, int sum_ranks,
                             unsigned long long* wrong) {
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    float expected = 0.0f;
    if (sum_ranks > 0)
      for (int r = 0; r < sum_ranks; ++r) expected += pattern(r, offset + i);
    else
      expected = pattern(rank, offset + i);
    local += p[i] != expected;
  }
  if (local) atomicAdd(wrong, local);
}

unsigned blocks_for(std::size_t n) { return static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 4096)); }

}  // namespace

std::size_t element_size(ElementType t) {
  switch (t) {
    case ElementType::kF32: return 4;
    case ElementType::kBf16:
    case ElementType::kF16: return 2;
    case ElementType::kFp8E4m3: return 1;
  }
  return 4;
}

void fill_random(void* data, std::size_t n, ElementType type, unsigned long long seed, cudaStream_t s) {
  if (n == 0) return;
  const unsigned b = blocks_for(n);
  switch (type) {
    case ElementType::kF32: fill_kernel<<<b, 256, 0, s>>>(static_cast<float*>(data), n, seed); break;
    case ElementType::kBf16: fill_kernel<<<b, 256, 0, s>>>(static_cast<__nv_bfloat16*>(data), n, seed); break;
    case ElementType::kF16: fill_kernel<<<b, 256, 0, s>>>(static_cast<__half*>(data), n, seed); break;
    case ElementType::kFp8E4m3: fill_kernel<<<b, 256, 0, s>>>(static_cast<__nv_fp8_e4m3*>(data), n, seed); break;
  }
}

void copy_kernel(void* dst, const void* src, std::size_t bytes, int ctas, cudaStream_t s) {
  copy16<<<static_cast<unsigned>(std::max(ctas, 1)), 512, 0, s>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src),
                                                                  bytes / 16);
}

void hold_kernel(unsigned long long ns, cudaStream_t s) { hold<<<1, 1, 0, s>>>(ns); }

void fill_pattern(float* data, std::size_t n, int rank, std::size_t offset, cudaStream_t s) {
  if (n) pattern_kernel<<<blocks_for(n), 256, 0, s>>>(data, n, rank, offset);
}

void count_wrong(const float* data, std::size_t n, int rank, std::size_t offset, int sum_ranks,
                 unsigned long long* wrong, cudaStream_t s) {
  if (n) wrong_kernel<<<blocks_for(n), 256, 0, s>>>(data, n, rank, offset, sum_ranks, wrong);
}

}  // namespace moesim::calibrate::cuda
