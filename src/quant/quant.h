// Per-format reference (de)quantisers and dot products, on the CPU, f32 with careful
// accumulation. These are the oracle every GPU kernel is compared with.
//
// Dot-product accumulation order (GPU kernels are compared against exactly this):
//   * A row is cut into units: one block for quantised types, 32 elements for F32/F16/BF16
//     (the last F32/F16/BF16 unit may be shorter).
//   * Within a unit, w[j] is the integer code (quantised types) or the stored value (plain
//     types), and x[j]·w[j] goes into f32 lane j % 8; lanes are summed in element order and
//     then combined as ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). The unit's term is d · that, in
//     f32 (d = the block scale; 1 for plain types).
//   * Unit terms are summed in double, in row order; the result is rounded to f32 once.
//   A build for a target with FMA may fuse x[j]·w[j] into the lane addition; that changes only
//   the last bit of a lane, well inside the tolerances comparisons use.
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace gdn::quant {

// Scalar half/bfloat conversions, round-to-nearest-even. Subnormals are kept (not flushed),
// overflow gives ±inf, NaN stays NaN (made quiet, top payload bits kept).
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

// n must be a multiple of the type's block size; otherwise gdn::Error.
void dequantize_row(Type t, const void* src, float* dst, int64_t n);
// Reference quantiser of DESIGN.md §3 (matches llama.cpp 0.5.0's *_ref functions).
void quantize_row(Type t, const float* src, void* dst, int64_t n);
// sum_j w[j] * x[j] for one stored row against f32 activations; accumulates per block in
// f32 and across blocks in double so long rows do not drift (order: see top of file).
float dot_row(Type t, const void* row, const float* x, int64_t n);

// Activations quantised the way a dp4a GPU kernel does it, so such a kernel can be checked
// like-for-like: each run of 32 elements becomes int8 codes with an f32 scale.
inline constexpr int64_t kQ8ActBlock = 32;
struct BlockQ8Act {
  float d;  // amax / 127; 0 for an all-zero run
  int8_t q[kQ8ActBlock];
};
// dst gets n / 32 blocks; q = round(x / d), halves away from zero. n must be a multiple of 32.
void quantize_activations_q8(const float* x, int64_t n, BlockQ8Act* dst);
// sum_j w[j] * x[j] with x as quantize_activations_q8 left it. Per 32-element run s of a
// weight unit: the integer dot of codes (int32, exact) times (d_w · d_x[s]) in f32; for
// F32/F16/BF16 the run's dot is the f32 lane sum above and d_w = 1. Runs are summed in f32
// within the unit, units in double. n must be a multiple of 32 and of the type's block size.
float dot_row_q8(Type t, const void* row, const BlockQ8Act* x, int64_t n);

// Activations quantised per 128 elements for the Q1_0 GPU kernel (src/cuda/matmul_q1_0.cu):
// one activation scale per weight block, so a block's dot is one exact integer. Same rule as
// quantize_activations_q8 (d = amax / 127, q = round(x / d) halves away from zero), plus the
// block's code sum, which the kernel needs for sum s_j q_j = 2 * sum_{bit_j = 1} q_j - sum q_j.
inline constexpr int64_t kQ8Act128Block = 128;
struct BlockQ8Act128 {
  float d;      // amax / 127; 0 for an all-zero block
  int32_t sum;  // sum of q
  int8_t q[kQ8Act128Block];
};
// dst gets n / 128 blocks; n must be a multiple of 128.
void quantize_activations_q8_128(const float* x, int64_t n, BlockQ8Act128* dst);
// sum_j w[j] * x[j] for one Q1_0 row with x as quantize_activations_q8_128 left it: per block,
// the integer dot of signs and codes (int32, exact) times (d_w * d_x) in f32; blocks summed in
// double, rounded to f32 once. n must be a multiple of 128.
float dot_row_q1_0_q8_128(const void* row, const BlockQ8Act128* x, int64_t n);

}  // namespace gdn::quant
