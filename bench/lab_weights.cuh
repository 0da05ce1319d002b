// Random Q1_0 matrices made on the GPU, in the layout the Q1_0 kernels read (matmul_q1_0.cu),
// for the labs that time chains of GEMVs over more weights than L2 holds.
#pragma once

#include <cuda_fp16.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>

#include "cuda/check.h"
#include "cuda/matrix.h"

namespace gdn::bench {

__device__ inline uint32_t hash32(uint64_t i, uint32_t seed) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<uint32_t>(x >> 16);
}

// Random sign bits, and fp16 scales in [0.5, 1.5) / sqrt(n_in): any such block is valid Q1_0.
__global__ inline void fill_q1_kernel(uint32_t* bits, size_t n_words, __half* scales,
                                      size_t n_scales, float scale, uint32_t seed) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n_words; i += stride)
    bits[i] = hash32(i, seed);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n_scales; i += stride)
    scales[i] = __float2half(scale * (0.5f + float(hash32(i, seed ^ 0x5bd1e995u) >> 8) * 0x1p-24f));
}

// n_in a multiple of 512 (no padded quads, whose bits must be zero).
inline cuda::GpuMatrix random_q1(const char* name, int n_in, int n_out, uint32_t seed,
                                 cudaStream_t s) {
  cuda::GpuMatrix w;
  w.name = fmt::format("{} {}->{}", name, n_in, n_out);
  w.type = quant::Type::Q1_0;
  w.n_in = n_in;
  w.n_out = n_out;
  w.n_row_tiles = (n_out + 15) / 16;
  w.n_col_tiles = (n_in + 511) / 512;
  w.codes = cuda::DeviceBuffer(size_t(w.n_row_tiles * w.n_col_tiles) * 1024);
  w.scales = cuda::DeviceBuffer(size_t(w.n_row_tiles * w.n_col_tiles) * 128);
  fill_q1_kernel<<<1024, 256, 0, s>>>(w.codes.as<uint32_t>(), w.codes.bytes() / 4,
                                      w.scales.as<__half>(), w.scales.bytes() / 2,
                                      1.0f / std::sqrt(float(n_in)), seed);
  CUDA_CHECK_LAUNCH();
  return w;
}

}  // namespace gdn::bench
