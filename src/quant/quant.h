// Per-format reference (de)quantisers and dot products, on the CPU, f32 with careful
// accumulation. These are the oracle every GPU kernel is compared with.
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace gdn::quant {

// Scalar half/bfloat conversions (round-to-nearest-even, like ggml).
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

// n must be a multiple of the type's block size; otherwise gdn::Error.
void dequantize_row(Type t, const void* src, float* dst, int64_t n);
// Reference quantiser of DESIGN.md §3 (matches llama.cpp 0.5.0's *_ref functions).
void quantize_row(Type t, const float* src, void* dst, int64_t n);
// sum_j w[j] * x[j] for one stored row against f32 activations; accumulates per block in
// f32 and across blocks in double so long rows do not drift.
float dot_row(Type t, const void* row, const float* x, int64_t n);

}  // namespace gdn::quant
