// Q8_0 and Q4_0 matrix products on the chunked layout (matmul.cuh), f32 activations.
//   Q8_0: a block (32 int8 codes) is two chunks of 16 codes sharing one scale.
//   Q4_0: a block's 16 code bytes are one chunk: low nibbles are elements 0-15, high nibbles
//         16-31, each code - 8.
// The lane of a row widens its codes to f32, dots them with broadcast activations, and scales
// the chunk's sum once. At ~1.06 (Q8_0) and ~0.56 (Q4_0) bytes per weight, 3-4 instructions per
// weight stay under the issue budget; these formats need not be as fast as Q1_0 yet.
#include <cstring>

#include "cuda/matmul.cuh"

namespace gdn::cuda::mm {
namespace {

struct Q8Format {
  static constexpr int kElems = 16;
  static constexpr int kChunksPerBlock = 2;
  __device__ static void decode(const uint4& c, int /*sub*/, float (&w)[16]) {
    const uint32_t v[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      w[e] = static_cast<float>(static_cast<int8_t>(v[e / 4] >> (8 * (e % 4))));
    }
  }
};

struct Q4Format {
  static constexpr int kElems = 32;
  static constexpr int kChunksPerBlock = 1;
  __device__ static void decode(const uint4& c, int sub, float (&w)[16]) {
    const uint32_t v[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      const int code = static_cast<int>((v[e / 4] >> (8 * (e % 4) + 4 * sub)) & 0xf);
      w[e] = static_cast<float>(code - 8);
    }
  }
};

}  // namespace

GpuMatrix upload_q8(const model::Matrix& m, cudaStream_t s) {
  if (m.type == quant::Type::Q8_0) {
    return upload_chunked(m, ChunkedFormat{16, 2, &block_chunk<34, 2>, &block_scale<34>}, s);
  }
  return upload_chunked(m, ChunkedFormat{32, 1, &block_chunk<18, 1>, &block_scale<18>}, s);
}

void matmul_q8(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
               int64_t n_tokens, cudaStream_t s) {
  switch (w.type) {
    case quant::Type::Q8_0:
      return chunked_matmul<Q8Format>(w, x, ldx, y, ldy, n_tokens, s);
    case quant::Type::Q4_0:
      return chunked_matmul<Q4Format>(w, x, ldx, y, ldy, n_tokens, s);
    default:
      fail("cuda matmul_q8 '{}': type {} is not Q8_0/Q4_0", w.name, quant::type_info(w.type).name);
  }
}

unsigned matmul_fused_q8(const FusedGemv& f, cudaStream_t s) {
  switch (f.w[0]->type) {
    case quant::Type::Q8_0:
      return chunked_fused<Q8Format>(f, s);
    case quant::Type::Q4_0:
      return chunked_fused<Q4Format>(f, s);
    default:
      fail("cuda matmul_fused_q8 '{}': type {} is not Q8_0/Q4_0", f.w[0]->name,
           quant::type_info(f.w[0]->type).name);
  }
}

}  // namespace gdn::cuda::mm
