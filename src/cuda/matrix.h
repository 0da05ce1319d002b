// Weight matrices on the GPU and the matrix products of every weight format: a GEMV for decode
// (one token) and a batched kernel for prefill (many tokens per launch).
//
// A stored matrix {n_in, n_out} (model::Matrix: n_out rows of n_in elements in the GGUF block
// layout) is repacked once at upload into the layout its kernel wants, keeping the format's bit
// width: codes in 16-byte tiles that a warp reads as contiguous 512-byte segments, block scales
// (fp16, as stored) in an array apart from the codes. Each matmul_<family>.cu describes its
// layout and arithmetic; matmul.cu dispatches.
//
// C++17-clean: included from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/device.h"
#include "model/matrix.h"
#include "quant/types.h"

namespace gdn::cuda {

// A weight matrix in its kernel's layout. Both buffers are what a GEMV reads, padding included.
struct GpuMatrix {
  std::string name;
  quant::Type type = quant::Type::F32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  // Layout parameters (meaning per family: row tiles and 512-weight column quads for Q1_0,
  // 32-row groups and 16-byte column chunks for the others).
  int64_t n_row_tiles = 0;
  int64_t n_col_tiles = 0;
  DeviceBuffer codes;   // bits / bytes / plain values, 16-byte aligned tiles
  DeviceBuffer scales;  // fp16 block scales apart from the codes; empty for F32/F16/BF16

  size_t device_bytes() const { return codes.bytes() + scales.bytes(); }
};

// Repacks and copies (synchronously with respect to the host data: it is staged before return).
// Throws gdn::Error naming the matrix, type and shape for unsupported types, n_in not a
// multiple of the block size, or sizes the kernels cannot index.
GpuMatrix upload_matrix(const model::Matrix& m, cudaStream_t s);

// Scratch for quantised activations, grown on demand and owned by the caller (the executor).
// One workspace serves one stream: matmuls on one stream reuse it in order. Growing allocates,
// which a stream under graph capture cannot do: reserve() the largest shape before capturing.
class MatmulWorkspace {
 public:
  // Enough for any matmul with n_in <= max_n_in and n_tokens <= max_tokens.
  void reserve(int64_t max_n_in, int64_t max_tokens);
  // Scratch of at least `bytes` (16-byte aligned); fails during capture if it must grow.
  void* get(size_t bytes, cudaStream_t s);

 private:
  DeviceBuffer buf_;
};

// y[t][r] = sum_j W[r][j] * x[t][j] for t < n_tokens, r < n_out, j < n_in. x rows are ldx
// floats apart, y rows ldy floats apart (views into wider buffers). n_tokens == 1 runs the
// GEMV, n_tokens > 1 the batched kernel (weights read once per group of tokens, not once per
// token). Deterministic: the same inputs give bit-identical outputs on every run.
void matmul(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
            int64_t n_tokens, MatmulWorkspace& ws, cudaStream_t s);

// Kernel launches matmul() makes for n_tokens (the executor counts dispatches).
int matmul_launches(const GpuMatrix& w, int64_t n_tokens);

// What the checks compare a format against and how closely (max|gpu - ref| / max|ref|).
struct MatmulReference {
  bool q8_128_activations;  // true: quant::dot_row_q1_0_q8_128 (activations quantised per 128)
                            // false: quant::dot_row with f32 activations
  double tolerance;         // against that reference
};
MatmulReference matmul_reference(quant::Type t);

}  // namespace gdn::cuda
