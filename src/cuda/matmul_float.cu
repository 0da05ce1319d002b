// F32, F16 and BF16 matrix products on the chunked layout (matmul.cuh): a 16-byte chunk holds
// 4 (F32) or 8 (F16/BF16) consecutive weights of one row; the lane of a row widens them to f32
// (BF16: one shift or mask each; F16: one HADD2.F32 per pair) and FMAs them with activations
// every lane of the warp reads at the same address. These formats move 2-4 bytes per weight,
// so ~3 instructions per weight stay well inside the issue budget: they are bound by bytes.
// Rows of any length: the last chunk of a row is zero-padded and its activations past n_in are
// read as zero.
#include <cstring>

#include "cuda/float_formats.cuh"
#include "cuda/matmul.cuh"

namespace gdn::cuda::mm {
namespace {

// Bytes [16c, 16c + 16) of the row, zero past its end.
void plain_chunk(const uint8_t* row, size_t row_bytes, int64_t c, uint8_t* out) {
  const size_t begin = static_cast<size_t>(c) * 16;
  if (begin < row_bytes) std::memcpy(out, row + begin, std::min<size_t>(16, row_bytes - begin));
}

}  // namespace

GpuMatrix upload_float(const model::Matrix& m, cudaStream_t s) {
  const int64_t elems = m.type == quant::Type::F32 ? 4 : 8;
  return upload_chunked(m, ChunkedFormat{elems, 0, &plain_chunk, nullptr}, s);
}

void matmul_float(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
                  int64_t n_tokens, cudaStream_t s) {
  switch (w.type) {
    case quant::Type::F32:
      return chunked_matmul<F32Format>(w, x, ldx, y, ldy, n_tokens, s);
    case quant::Type::F16:
      return chunked_matmul<F16Format>(w, x, ldx, y, ldy, n_tokens, s);
    case quant::Type::BF16:
      return chunked_matmul<BF16Format>(w, x, ldx, y, ldy, n_tokens, s);
    default:
      fail("cuda matmul_float '{}': type {} is not a float format", w.name,
           quant::type_info(w.type).name);
  }
}

unsigned matmul_fused_float(const FusedGemv& f, cudaStream_t s) {
  switch (f.w[0]->type) {
    case quant::Type::F32:
      return chunked_fused<F32Format>(f, s);
    case quant::Type::F16:
      return chunked_fused<F16Format>(f, s);
    case quant::Type::BF16:
      return chunked_fused<BF16Format>(f, s);
    default:
      fail("cuda matmul_fused_float '{}': type {} is not a float format", f.w[0]->name,
           quant::type_info(f.w[0]->type).name);
  }
}

}  // namespace gdn::cuda::mm
