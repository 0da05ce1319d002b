// The int8 tensor-core form of the Q1_0 block product (Q1Variant::kImma, the prefill product of
// matmul_q1_0.cu): which words each lane feeds to `mma.sync m16n8k32 .s8`. Host and device code,
// so that a host test (test_cuda_backend, Q1Imma.*) can emulate the mma from the PTX fragment
// layout with the kernel's own operand functions.
//
// A block (128 elements) of one row tile against 8 tokens is four mmas j = 0..3. Lane g*4+t
// holds weight word t (elements 32t..32t+31) of rows g and g+8, as the GEMV's layout gives it,
// and reads the dp4a code words of token g that pair with it: word t*8+k holds the codes of
// elements 32t+8i+k in byte i (i = 0..3). In mma j the lane's k-rows 4t+i are elements
// 32t+8i+2j and its k-rows 16+4t+i elements 32t+8i+2j+1, for both operands:
//   A: a0 / a1 = imma_bits(word of row g / g+8, 2j), a2 / a3 = the same with 2j+1;
//   B: b0 / b1 = code words imma_b_word(t, j, 0) / (t, j, 1) of token g.
// The A bytes are the weight bits (0 or 1), so the four mmas give D = sum_j b_j q_j and the
// block's signed dot is imma_signed_dot(D, sum q) = 2D - sum q (signs s = 2b - 1), exact.
// D's lane layout (imma_d_row, imma_d_token): c0 = (row g, token 2t), c1 = (g, 2t+1), c2 =
// (g+8, 2t), c3 = (g+8, 2t+1).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gdn::cuda::mm {

// Bytes i = bit k + 8i of the weight word w: the A register for k-offset k (0..7).
__host__ __device__ __forceinline__ uint32_t imma_bits(uint32_t w, int k) {
  return (w >> k) & 0x01010101u;
}

// The code word (of a block's 32) that lane t passes as b0 (r = 0) or b1 (r = 1) in mma j.
__host__ __device__ __forceinline__ int imma_b_word(int t, int j, int r) {
  return t * 8 + 2 * j + r;
}

// D register c (0..3) of lane g*4+t: row g + 8 (c / 2) of the tile, token 2t + c % 2 of the 8.
__host__ __device__ __forceinline__ int imma_d_row(int lane, int c) {
  return (lane >> 2) + 8 * (c >> 1);
}
__host__ __device__ __forceinline__ int imma_d_token(int lane, int c) {
  return 2 * (lane & 3) + (c & 1);
}

// The block's dot of signs 2b - 1 with codes q from D = sum b q and the codes' sum.
__host__ __device__ __forceinline__ int imma_signed_dot(int d, int code_sum) {
  return 2 * d - code_sum;
}

}  // namespace gdn::cuda::mm
