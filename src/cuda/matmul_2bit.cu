// Q2_0 (64-weight blocks, 16 code bytes) and PQ2_0 (PrismML, 128-weight blocks, 32 code bytes)
// on the chunked layout (matmul.cuh), f32 activations. A chunk is 64 weights (a whole Q2_0
// block, half a PQ2_0 block); its word s holds elements 16s..16s+15 at 2 bits each, value
// (code - 1) * d. Decoding costs ~3 instructions per weight plus the FMA and broadcast
// activation loads, more than the ~2 the issue budget allows at 0.28 bytes per weight: these
// run below bandwidth, acceptable until a model in these formats matters (Q1_0's bit-plane mma
// would extend to two weight bit planes).
#include "cuda/matmul.cuh"

namespace gdn::cuda::mm {
namespace {

template <int kChunksPerBlockT>
struct Q2Format {
  static constexpr int kElems = 64;
  static constexpr int kChunksPerBlock = kChunksPerBlockT;
  __device__ static void decode(const uint4& c, int sub, float (&w)[16]) {
    const uint32_t v = sub == 0 ? c.x : sub == 1 ? c.y : sub == 2 ? c.z : c.w;
#pragma unroll
    for (int e = 0; e < 16; ++e)
      w[e] = static_cast<float>(static_cast<int>((v >> (2 * e)) & 3) - 1);
  }
};

}  // namespace

GpuMatrix upload_2bit(const model::Matrix& m, cudaStream_t s) {
  if (m.type == quant::Type::Q2_0) {
    return upload_chunked(m, ChunkedFormat{64, 1, &block_chunk<18, 1>, &block_scale<18>}, s);
  }
  return upload_chunked(m, ChunkedFormat{64, 2, &block_chunk<34, 2>, &block_scale<34>}, s);
}

void matmul_2bit(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
                 int64_t n_tokens, cudaStream_t s) {
  switch (w.type) {
    case quant::Type::Q2_0:
      return chunked_matmul<Q2Format<1>>(w, x, ldx, y, ldy, n_tokens, s);
    case quant::Type::PQ2_0:
      return chunked_matmul<Q2Format<2>>(w, x, ldx, y, ldy, n_tokens, s);
    default:
      fail("cuda matmul_2bit '{}': type {} is not Q2_0/PQ2_0", w.name,
           quant::type_info(w.type).name);
  }
}

unsigned matmul_fused_2bit(const FusedGemv& f, cudaStream_t s) {
  switch (f.w[0]->type) {
    case quant::Type::Q2_0:
      return chunked_fused<Q2Format<1>>(f, s);
    case quant::Type::PQ2_0:
      return chunked_fused<Q2Format<2>>(f, s);
    default:
      fail("cuda matmul_fused_2bit '{}': type {} is not Q2_0/PQ2_0", f.w[0]->name,
           quant::type_info(f.w[0]->type).name);
  }
}

}  // namespace gdn::cuda::mm
