// The norms' reduction order, shared by every kernel that normalises: the rms_norm/l2_norm
// kernels (norm.cu), the GDN kernel's fused q/k L2 norm (gdn.cu) and the fused GEMV prologue
// (matmul_*.cu). A fused kernel is bit-identical to the norm kernel it replaces only if it
// adds the same squares in the same order and derives the scale the same way; this header is
// that order, written once.
//
// The canonical order for a chunk of n floats: T = norm_threads(n) virtual threads; virtual
// thread j sums x[i]² for i = tile_index(n, base, j, e) over the tiles base = 0, 8T, 16T, ...
// and e = 0..7 (i < n), with fmaf from 0; each virtual warp (32 consecutive j) adds its lanes
// by the xor butterfly (warp_sum); the warp sums are added in warp order starting from 0. The
// scale is 1/sqrt(total/n + eps) (rms) or 1/sqrt(total + eps) (l2) in f32 (rsqrt_refined);
// the output is (x·scale)·w (rms) or x·scale (l2).
//
// tile_index: a chunk of more than one virtual warp (n > 256: hidden states) gives virtual
// thread j eight consecutive elements, base + 8j + e: an eighth of a 128-element activation
// block, the piece a thread of the Q1_0 GEMV's direct prologue loads and quantises, so that
// prologue adds the squares of the floats it holds instead of loading x a second time in
// another order. A chunk of one virtual warp (heads: n <= 256) keeps them 32 apart, base +
// 32e + j: the GDN and attention kernels normalise heads from shared memory, where lanes 8
// floats apart would meet in the same banks (consecutive elements made the recurrence 5.20 ->
// 5.70 µs a step, H100, 2026-12-06).
//
// Precision vs the CPU (which sums in double): see norm.cu.
#pragma once

#include "cuda/kernel_util.cuh"

namespace gdn::cuda::norm {

constexpr int kPerThread = 8;          // elements a virtual thread adds per tile
constexpr int kMaxNormThreads = 1024;  // the norm kernel's largest CTA

// Virtual threads (and the norm kernel's CTA size) for a chunk of n floats.
__host__ __device__ constexpr int norm_threads(int n) {
  const int want = (n + kPerThread - 1) / kPerThread;
  const int t = (want + 31) / 32 * 32;
  return t < kMaxNormThreads ? t : kMaxNormThreads;
}
__host__ __device__ constexpr int norm_warps(int n) {
  return norm_threads(n) / 32;
}

// Whether a chunk of n floats gives a virtual thread consecutive elements (more than one
// virtual warp), not elements 32 apart.
__host__ __device__ constexpr bool consecutive_tiles(int n) {
  return norm_threads(n) > 32;
}
// Element e of virtual thread j in the tile at `base` of a chunk of n floats.
__host__ __device__ constexpr int tile_index(int n, int base, int j, int e) {
  return consecutive_tiles(n) ? base + kPerThread * j + e : base + 32 * e + j;
}
// The elements of virtual thread `vw * 32 + lane` in the tile at `base` of x[0, n):
// x[tile_index(n, base, j, e)] for e < kPerThread, 0 past n. Loads only, so that callers can
// issue several tiles' loads before the arithmetic.
__device__ __forceinline__ void load_tile(const float* x, int n, int vw, int base,
                                          float (&v)[kPerThread]) {
  const int j = vw * 32 + (threadIdx.x & 31);
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int i = tile_index(n, base, j, e);
    v[e] = i < n ? x[i] : 0.0f;
  }
}
// ss + the tile's squares in element order. An element past n adds fmaf(0, 0, ss) = ss
// exactly (ss >= +0), so a padded tile sums like the guarded loop it replaces, and so does one
// whose elements from kElems on, all past n, are left out: a compiler cannot drop those FMAs
// itself (it cannot know that ss is not -0).
template <int kElems = kPerThread>
__device__ __forceinline__ float add_tile_squares(const float (&v)[kPerThread], float ss) {
  static_assert(kElems >= 1 && kElems <= kPerThread, "elements of a tile");
#pragma unroll
  for (int e = 0; e < kElems; ++e) ss = fmaf(v[e], v[e], ss);
  return ss;
}
// Whether the chunk is one tile per virtual thread (every n up to 8192).
__host__ __device__ constexpr bool one_tile(int n) {
  return n <= kPerThread * norm_threads(n);
}

// The sum of virtual warp `vw` of the canonical order for x[0, n), on every lane of the
// calling warp (which must be converged; all 32 lanes call it).
__device__ __forceinline__ float virtual_warp_sum_squares(const float* x, int n, int vw) {
  float ss = 0.0f;
  for (int base = 0; base < n; base += kPerThread * norm_threads(n)) {
    float v[kPerThread];
    load_tile(x, n, vw, base, v);
    ss = add_tile_squares(v, ss);
  }
  return detail::warp_sum(ss);
}

// The warp sums added in warp order (what the norm kernel's block_sum does).
__device__ __forceinline__ float combine_warp_sums(const float* sums, int n_warps) {
  float total = 0.0f;
  for (int w = 0; w < n_warps; ++w) total += sums[w];
  return total;
}

// The whole canonical sum of squares of a chunk of n <= 256 floats (one virtual warp: one
// tile) by one warp, from the tile the warp loaded with load_tile(x, n, 0, 0, v): what a fused
// kernel that keeps the head's elements uses (attention's q/k head norms).
template <int kElems = kPerThread>
__device__ __forceinline__ float head_sum_squares_of_tile(const float (&v)[kPerThread]) {
  return 0.0f + detail::warp_sum(add_tile_squares<kElems>(v, 0.0f));
}
// The same from memory: what a fused kernel uses for a head (GDN q/k, a 128-float ssm_norm
// head). kN > 0: n = kN is known at compile time, and a lane's elements from ceil(kN / 32) on,
// past n on every lane, are left out (add_tile_squares).
template <int kN = 0>
__device__ __forceinline__ float head_sum_squares(const float* x, int n = kN) {
  static_assert(kN >= 0 && !consecutive_tiles(kN), "a head of one virtual warp");
  constexpr int kElems = kN == 0 ? kPerThread : (kN + 31) / 32;
  float v[kPerThread];
  load_tile(x, n, 0, 0, v);
  return head_sum_squares_of_tile<kElems>(v);
}

// 1/sqrt(v) for v > 0 in f32: the hardware estimate and one Newton step (y + y/2 * (1 - v y²),
// the residual by FMA), within about an ulp of the exact value. It replaced 1/sqrt in double
// (two DDIVs and a DSQRT on the one thread that finishes a norm, while its CTA waits at a
// barrier). Measured (H200, 2026-12-04, bench/RESULTS.md): the fused GEMVs' rms prologue
// (pdl_wait to the scales) 1.54 -> 1.28 µs for gate+up, the recurrence (q/k L2 norms)
// 5.85 -> 5.39 µs a step, timeline 2851.4 -> 2810.2 µs/token, tg128 338.4 -> 341.7.
__device__ __forceinline__ float rsqrt_refined(float v) {
  const float y = rsqrtf(v);
  const float e = __fmaf_rn(-__fmul_rn(v, y), y, 1.0f);
  return __fmaf_rn(__fmul_rn(0.5f, y), e, y);
}
__device__ __forceinline__ float rms_scale(float total, int n, float eps) {
  return rsqrt_refined(__fadd_rn(__fdiv_rn(total, static_cast<float>(n)), eps));
}
__device__ __forceinline__ float l2_scale(float total, float eps) {
  return rsqrt_refined(__fadd_rn(total, eps));
}

}  // namespace gdn::cuda::norm
