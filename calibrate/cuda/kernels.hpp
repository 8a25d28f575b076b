// Device kernels of the measuring part: random fills (never zeros), the SM copy kernel standing in
// for NCCL's channel kernels, and the collective correctness checks (nccl-tests' #wrong).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace moesim::calibrate::cuda {

enum class ElementType { kF32, kBf16, kF16, kFp8E4m3 };
std::size_t element_size(ElementType t);
// Uniform in [-1, -0.01] u [0.01, 1]: random and never zero, so no sparsity shortcut applies.
void fill_random(void* data, std::size_t elements, ElementType type, unsigned long long seed, cudaStream_t stream);
// `bytes` (a multiple of 16) from src to dst on `ctas` blocks of 512 threads, 16-byte accesses.
void copy_kernel(void* dst, const void* src, std::size_t bytes, int ctas, cudaStream_t stream);
// One thread that spins for about `ns` nanoseconds (the global timer): holds a stream while the host
// enqueues work behind it, so that work on two streams can start together.
void hold_kernel(unsigned long long ns, cudaStream_t stream);
// The collective pattern: element i of rank r holds pattern(r, i), a small integer (sums are exact).
void fill_pattern(float* data, std::size_t elements, int rank, std::size_t offset, cudaStream_t stream);
// Counts elements of data[0..n) differing from pattern(rank, offset + i) (single source) or from
// sum over ranks 0..nranks-1 of pattern(r, offset + i) (sum_ranks > 0), adding to *wrong.
void count_wrong(const float* data, std::size_t n, int rank, std::size_t offset, int sum_ranks,
                 unsigned long long* wrong, cudaStream_t stream);

}  // namespace moesim::calibrate::cuda
