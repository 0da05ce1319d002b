// The chunk formats of the float weight types (matmul.cuh's chunked layout): how a 16-byte chunk
// widens to f32. Shared by matmul_float.cu's products and by the Q1_0 GEMV's folded BF16 rows
// (matmul_q1_0.cu), which must decode the same bits the same way.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace gdn::cuda::mm {

struct F32Format {
  static constexpr int kElems = 4;
  static constexpr int kChunksPerBlock = 0;
  __device__ static void decode(const uint4& c, int /*sub*/, float (&w)[4]) {
    w[0] = __uint_as_float(c.x);
    w[1] = __uint_as_float(c.y);
    w[2] = __uint_as_float(c.z);
    w[3] = __uint_as_float(c.w);
  }
};

struct F16Format {
  static constexpr int kElems = 8;
  static constexpr int kChunksPerBlock = 0;
  __device__ static void decode(const uint4& c, int /*sub*/, float (&w)[8]) {
    const uint32_t v[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2 h;
      std::memcpy(&h, &v[i], sizeof h);
      const float2 f = __half22float2(h);
      w[2 * i] = f.x;
      w[2 * i + 1] = f.y;
    }
  }
};

struct BF16Format {
  static constexpr int kElems = 8;
  static constexpr int kChunksPerBlock = 0;
  __device__ static void decode(const uint4& c, int /*sub*/, float (&w)[8]) {
    const uint32_t v[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[2 * i] = __uint_as_float(v[i] << 16);
      w[2 * i + 1] = __uint_as_float(v[i] & 0xffff0000u);
    }
  }
};

}  // namespace gdn::cuda::mm
