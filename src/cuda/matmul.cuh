// Shared by the matmul kernel families (matmul_*.cu) and the GEMV lab (bench/gemv_lab.cu):
// load helpers, programmatic-dependent-launch helpers, the chunked GEMV kernel that every
// format except Q1_0 uses, the fused decode GEMV's prologue (matrix.h: matmul_fused) and its
// chunked kernel, and the families' internal entry points.
//
// The chunked layout (F32, F16, BF16, Q8_0, Q4_0, Q2_0, PQ2_0). Rows are grouped by 32; in a
// group, each row's codes are cut into 16-byte chunks along n_in and stored chunk-major,
// lane-minor: codes[group][chunk][lane] is 16 bytes of row group*32+lane. A warp owns a row
// group, lane = row: its load of one chunk is a contiguous 512-byte segment, and every lane
// needs the same activations for it, so activation loads are warp broadcasts (DESIGN.md §6:
// lanes reading different stretches of x were L1-bound at 0.4-0.5 TB/s). Scales (fp16, as
// stored) sit apart as scales[group][block][lane]. Rows past n_out and chunk bytes past the
// row are zero. The warps of a CTA split n_in and are summed through shared memory in warp
// order (deterministic, no atomics).
#pragma once

#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "common/error.h"
#include "cuda/check.h"
#include "cuda/conv.cuh"
#include "cuda/matrix.h"
#include "cuda/norm.cuh"

namespace gdn::cuda::mm {

constexpr unsigned kFullMask = 0xffffffffu;

// ---------------------------------------------------------------------------------------------
// Device helpers

// Weights are read once per GEMV: no L1 allocation, so the activations stay cached. Marked
// evict-first in L2 as well (the loads by a cache policy, the bulk prefetches too), the decode
// was slower (H100, 2026-12-06, same call: gate+up 14.92 -> 15.30 µs, tg128 -1.0%).
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Barrier `id` (1..15; 0 is __syncthreads) over the `threads` threads (a multiple of 32) of the
// warps that call it: a team of warps inside a CTA synchronises without stalling the others.
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Arrives at barrier `id` without waiting: the warps that only produce for a bar_sync caller.
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// A CTA may touch another's shared memory in its cluster only once that CTA has started: every
// CTA arrives at entry and waits before its first remote access (by then the wait is free).
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}

// n / d for 0 <= n < 2^31 by a multiply-high and a shift (d fixed per launch, set on the host):
// the per-element head index of a prologue without an integer division.
struct FastDiv {
  uint32_t m = 1, l = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t d) {
    while ((uint64_t(1) << l) < d) ++l;  // l = ceil(log2 d)
    m = static_cast<uint32_t>(((uint64_t(1) << 32) * ((uint64_t(1) << l) - d)) / d + 1);
  }
  __device__ __forceinline__ int div(int n) const {
    const uint32_t t = __umulhi(static_cast<uint32_t>(n), m);
    return static_cast<int>((t + static_cast<uint32_t>(n)) >> l);
  }
};

// ---------------------------------------------------------------------------------------------
// Host helpers

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}
// The launchers and PDL helpers live in kernel_util.cuh, shared with the other kernel families.
using detail::launch;
using detail::launch_clusters;
using detail::pdl_enter;
using detail::pdl_launch_dependents;
using detail::pdl_wait;
using detail::prefetch_l2;

// The multiprocessors a fused GEMV's persistent grid may spread over: all but those a
// concurrent launch holds (FusedGemv::spare_sms), at least one.
inline int usable_sms(const FusedGemv& f) {
  return std::max(1, sm_count() - f.spare_sms);
}

// Lets `kernel` take up to the device's opt-in maximum of dynamic shared memory (once per
// kernel and device; not a stream operation, so safe during graph capture). Returns that maximum.
size_t allow_max_smem(const void* kernel);

// Shape assertions shared by the launchers.
void check_matmul_args(const GpuMatrix& w, const float* x, int64_t ldx, const float* y, int64_t ldy,
                       int64_t n_tokens);

// ---------------------------------------------------------------------------------------------
// The chunked GEMV / batched kernel

// Tokens per pass of the batched kernel: each decoded chunk is used NT times.
constexpr int kBatchTokens = 8;
constexpr int kMaxWarps = 16;
// Chunks each warp has in flight (16-byte loads per lane before the first use) when it works
// for NT tokens. A warp's range is a chain of rounds, each waiting for its loads: one token
// has registers to spare for more loads per round, and the few-group launches (Bonsai's
// 48-row beta and alpha: 40 chunks per warp) are bound by the number of rounds. The unroll
// does not change the arithmetic (chunks are added in order either way). Measured on the H200
// (2026-12-01, all rungs, beta and alpha 4 CTAs of 16 warps): 4 -> 8 no change (227.2 ->
// 226.5 tok/s), 4 -> 16 233.5. Measured slower later (branch exp/s13-chunk-rounds): a ring
// refilling each slot as its chunk is used (beta+alpha 7.60 -> 10.76 us), and the first round
// issued before the kernel's wait (beta+alpha alone 7.00 us, but the qkv step ~1 us longer).
// 20 a round for the unscaled formats (two rounds of 20) gained nothing: tg128 308-309
// against 307-311 (2026-12-02).
__host__ __device__ constexpr int chunk_unroll(int nt) {
  return nt == 1 ? 16 : 4;
}
// The warps of a row group split n_in into ranges of at least this many chunks, at most
// kMaxWarps ranges.
constexpr int kMinChunksPerWarp = 8;

// Warps per row group (= ranges of n_in summed separately, then added in warp order). A
// function of n_in (in chunks) only, never of n_out: a row's float summation order must not
// depend on which matrices share a launch (the fused GEMV is bit-identical to matmul()).
// Large n_out still fills the GPU through the number of groups; small n_out (48 rows) gets
// the most warps a CTA holds on its two groups.
__host__ __device__ constexpr int chunked_warps(int n_chunks) {
  const int w = n_chunks / kMinChunksPerWarp;
  return w < 1 ? 1 : w > kMaxWarps ? kMaxWarps : w;
}
// The one-token chunked GEMVs' ranges: chunked_warps(n_chunks) of `per` chunks (the last ones
// shorter or empty), summed each from 0 in chunk order, then added in range order from 0.
struct ChunkRanges {
  int n, per;
};
__host__ __device__ constexpr ChunkRanges chunk_ranges(int n_chunks) {
  const int n = chunked_warps(n_chunks);
  return {n, (n_chunks + n - 1) / n};
}

// CTAs that share one row group's `warps` chunk ranges in the one-token chunked_kernel (a
// cluster; the portable limit is 8): doubled while it divides the ranges and the grid of
// `units` such clusters stays within the SMs. A few row groups (Bonsai's 48-row beta and alpha:
// 2 each) would otherwise run on as many SMs, each issuing every instruction of 16 warps.
// Measured on the H200: the fused GEMV split the same way took decode from 219.3 to 205.7
// tok/s (2026-11-30, each CTA staging p(x) with 2 warps), and with the norm's virtual warps
// shared over the cluster and each CTA staging only its ranges' elements, 236.0 to 234.4
// (2026-12-01): the fused kernel keeps whole row groups per CTA.
int cluster_parts(int64_t units, int warps);

struct ChunkedArgs {
  const uint4* codes;    // [n_groups][n_chunks][32]
  const __half* scales;  // [n_groups][n_blocks][32] or null
  const float* x;        // [n_tokens][ldx]
  int64_t ldx;
  float* y;  // [n_tokens][ldy]
  int64_t ldy;
  int n_in, n_out, n_chunks, n_blocks, n_tokens, chunks_per_warp;
  int parts;  // CTAs (a cluster) per row group: cluster_parts
};

// A format F provides kElems (elements per 16-byte chunk), kChunksPerBlock (chunks sharing a
// scale; 0: no scales) and decode(chunk, sub, w): elements [16*sub, 16*sub + 16) of the chunk
// (all kElems when kElems < 16) as unscaled floats, in the order the activations follow.
template <class F>
constexpr int sub_elems() {
  return F::kElems < 16 ? F::kElems : 16;
}

// x[k .. k+N) of one activation row, zero past n_in (a short last chunk of a plain row).
template <int N, bool kVec>
__device__ __forceinline__ void load_x(const float* xr, int k, int n_in, float (&v)[N]) {
  if (kVec && k + N <= n_in) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const float4 f = __ldg(reinterpret_cast<const float4*>(xr + k) + i);
      v[4 * i] = f.x;
      v[4 * i + 1] = f.y;
      v[4 * i + 2] = f.z;
      v[4 * i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = k + i < n_in ? __ldg(xr + k + i) : 0.0f;
  }
}

// One chunk's part of a dot: its kSub decoded weights against their activations, an FMA chain
// from `part`; and the part added into its range's sum, scaled by the chunk's block d (1 for the
// unscaled formats). chunked_dot's per-chunk arithmetic, shared with the Q1_0 GEMV's folded
// rows (matmul_q1_0.cu), which must give the same bits.
template <int kSub>
__device__ __forceinline__ float chunk_fma(const float (&w)[kSub], const float (&xv)[kSub],
                                           float part) {
#pragma unroll
  for (int e = 0; e < kSub; ++e) part = fmaf(w[e], xv[e], part);
  return part;
}
__device__ __forceinline__ float add_chunk(float acc, float d, float part) {
  return fmaf(d, part, acc);
}

// One lane's dot products over chunks [c_begin, c_end) of its row (codes/scales point at the
// row group's first chunk/block, plus the lane) for nt <= NT tokens: per chunk, an FMA chain
// over its elements from 0, scaled once and added into acc. xload(n, k, xv) fills the kSub
// activations of token n from element k. The one home of this arithmetic: matmul() (global x)
// and the fused GEMV (x staged in shared memory) both run it, so they agree bit for bit.
template <class F, int NT, class XLoad>
__device__ __forceinline__ void chunked_dot(const uint4* codes, const __half* scales, int c_begin,
                                            int c_end, int nt, const XLoad& xload,
                                            float (&acc)[NT]) {
  constexpr int kSub = sub_elems<F>();
  constexpr int kSubs = F::kElems / kSub;
#pragma unroll
  for (int n = 0; n < NT; ++n) acc[n] = 0.0f;
  constexpr int kUnroll = chunk_unroll(NT);
  for (int c0 = c_begin; c0 < c_end; c0 += kUnroll) {
    uint4 chunk[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (c0 + u < c_end) chunk[u] = ld_stream(codes + int64_t(c0 + u) * 32);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u;
      if (c >= c_end) break;
      float d = 1.0f;
      if constexpr (F::kChunksPerBlock > 0) {
        d = __half2float(scales[int64_t(c / F::kChunksPerBlock) * 32]);
      }
      float part[NT];
#pragma unroll
      for (int n = 0; n < NT; ++n) part[n] = 0.0f;
#pragma unroll
      for (int sub = 0; sub < kSubs; ++sub) {
        float w[kSub];
        F::decode(chunk[u], sub, w);
        const int k = c * F::kElems + sub * kSub;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          if (NT > 1 && n >= nt) break;
          float xv[kSub];
          xload(n, k, xv);
          part[n] = chunk_fma(w, xv, part[n]);
        }
      }
#pragma unroll
      for (int n = 0; n < NT; ++n) acc[n] = add_chunk(acc[n], d, part[n]);
    }
  }
}

// Asks L2 for chunks [c_begin, c_end) of one row group and their scales (codes and scales
// point at the group's first chunk and block): one warp's whole share, before it waits for
// the previous kernel (weights never depend on it).
template <class F>
__device__ __forceinline__ void prefetch_chunks(const uint4* codes, const __half* scales,
                                                int c_begin, int c_end) {
  if (c_begin >= c_end) return;
  prefetch_l2(codes + int64_t(c_begin) * 32, static_cast<uint32_t>(c_end - c_begin) * 512u);
  if constexpr (F::kChunksPerBlock > 0) {
    const int b0 = c_begin / F::kChunksPerBlock, b1 = (c_end - 1) / F::kChunksPerBlock;
    prefetch_l2(scales + int64_t(b0) * 32, static_cast<uint32_t>(b1 - b0 + 1) * 64u);
  }
}

// grid (n_groups * parts, ceil(n_tokens / NT)) in clusters of `parts` CTAs along x, block
// 32 * warps / parts: cluster CTA r runs chunk ranges [r, r + 1) * warps / parts of its group,
// and every range's sums go to the first CTA's shared memory, which adds them in range order
// (as one CTA of all the warps would). kVec: x rows are 16-byte aligned.
template <class F, int NT, bool kVec>
__global__ void __launch_bounds__(kMaxWarps * 32) chunked_kernel(ChunkedArgs a) {
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  constexpr int kSub = sub_elems<F>();
  __shared__ float red[kMaxWarps][NT][32];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rank = a.parts > 1 ? static_cast<int>(cluster.block_rank()) : 0;
  const int n_warps = (blockDim.x >> 5) * a.parts;  // chunk ranges of the group
  const int range = rank * (blockDim.x >> 5) + warp;
  const int group = blockIdx.x / a.parts;
  const int tok0 = blockIdx.y * NT;
  const int c_begin = range * a.chunks_per_warp;
  const int c_end = min(a.n_chunks, c_begin + a.chunks_per_warp);
  const uint4* codes = a.codes + int64_t(group) * a.n_chunks * 32 + lane;
  const __half* scales = a.scales ? a.scales + int64_t(group) * a.n_blocks * 32 + lane : nullptr;
  if (a.parts > 1) cluster_arrive();
  if (lane == 0 && blockIdx.y == 0) prefetch_chunks<F>(codes, scales, c_begin, c_end);
  pdl_enter();

  float acc[NT];
  chunked_dot<F, NT>(
      codes, scales, c_begin, c_end, a.n_tokens - tok0,
      [&](int n, int k, float(&xv)[kSub]) {
        load_x<kSub, kVec>(a.x + int64_t(tok0 + n) * a.ldx, k, a.n_in, xv);
      },
      acc);

  if (a.parts > 1) cluster_wait();
  float* first = a.parts > 1 ? cluster.map_shared_rank(&red[0][0][0], 0) : &red[0][0][0];
#pragma unroll
  for (int n = 0; n < NT; ++n) first[(range * NT + n) * 32 + lane] = acc[n];
  // Every range's partial sums are in the first CTA before they are added.
  if (a.parts > 1) {
    cluster.sync();
  } else {
    __syncthreads();
  }
  if (rank != 0) return;
  for (int i = threadIdx.x; i < NT * 32; i += blockDim.x) {
    const int n = i / 32, l = i % 32;
    const int row = group * 32 + l, tok = tok0 + n;
    if (row >= a.n_out || tok >= a.n_tokens) continue;
    float sum = 0.0f;
    for (int w = 0; w < n_warps; ++w) sum += red[w][n][l];  // fixed order: deterministic
    a.y[int64_t(tok) * a.ldy + row] = sum;
  }
}

// Launches the chunked kernel for format F (one launch for any n_tokens).
template <class F>
void chunked_matmul(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
                    int64_t n_tokens, cudaStream_t s) {
  check_matmul_args(w, x, ldx, y, ldy, n_tokens);
  ChunkedArgs a;
  a.codes = w.codes.as<const uint4>();
  a.scales = F::kChunksPerBlock > 0 ? w.scales.as<const __half>() : nullptr;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.n_in = static_cast<int>(w.n_in);
  a.n_out = static_cast<int>(w.n_out);
  a.n_chunks = static_cast<int>(w.n_col_tiles);
  a.n_blocks = F::kChunksPerBlock > 0 ? static_cast<int>(w.n_col_tiles / F::kChunksPerBlock) : 0;
  a.n_tokens = static_cast<int>(n_tokens);
  const int64_t groups = w.n_row_tiles;
  const ChunkRanges ranges = chunk_ranges(a.n_chunks);
  const int warps = ranges.n;
  a.chunks_per_warp = ranges.per;
  const bool vec = aligned16(x) && ldx % 4 == 0;
  const dim3 block(32 * warps);
  a.parts = 1;
  if (n_tokens == 1) {
    a.parts = cluster_parts(groups, warps);
    const dim3 grid(static_cast<unsigned>(groups * a.parts), 1);
    const dim3 part_block(32 * warps / a.parts);
    const unsigned cluster = a.parts > 1 ? static_cast<unsigned>(a.parts) : 0;
    if (vec) {
      launch_clusters(&chunked_kernel<F, 1, true>, grid, part_block, 0, true, cluster, s, a);
    } else {
      launch_clusters(&chunked_kernel<F, 1, false>, grid, part_block, 0, true, cluster, s, a);
    }
  } else {
    const dim3 grid(static_cast<unsigned>(groups),
                    static_cast<unsigned>(ceil_div(n_tokens, kBatchTokens)));
    if (vec) {
      launch(&chunked_kernel<F, kBatchTokens, true>, grid, block, 0, true, s, a);
    } else {
      launch(&chunked_kernel<F, kBatchTokens, false>, grid, block, 0, true, s, a);
    }
  }
  CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// The fused decode GEMV's prologue (matrix.h: Prologue), run by every CTA of a fused launch:
// p(x) for the whole input vector, staged in shared memory for the product. It reproduces the
// unfused kernels' float operations exactly:
//   RmsNorm / HeadRmsNormSiluGate: the squares of each chunk (n_in, or head_dim) are added in
//     norm.cuh's canonical order — every virtual warp of norm_warps(chunk) by
//     virtual_warp_sum_squares, spread over this CTA's real warps, then combine_warp_sums and
//     rms_scale — exactly the functions norm.cu's rms_norm kernel runs; the element is then
//     x·scale·w in the kernel's order ((x·scale)·w).
//   HeadRmsNormSiluGate then multiplies by detail::silu(gate), SigmoidGate x by
//     detail::sigmoid(gate): elementwise.cu's SiluMul / SigmoidMul functors, `x * silu(g)`.
//   HeadRmsNormMulGate / MulGate multiply by the gate as it is (the Mul functor, `x * g`): on
//     a gate stored as detail::silu(z) / detail::sigmoid(g) (the epilogue's silu_mat,
//     attention's fused prep with gate_sigmoid) that is the same float product.
// Elements past n_in are staged as 0.

struct PrologueArgs {
  const float* x = nullptr;     // [n_in]
  const float* gate = nullptr;  // [n_in] (prologue_gated)
  const float* norm = nullptr;  // [n_in] (RmsNorm) or [head_dim] (prologue_head_normed)
  int n_in = 0;
  int chunk = 0;  // the norm's chunk: n_in (RmsNorm) or head_dim; 0 without a norm
  FastDiv head;   // division by head_dim (prologue_head_normed)
  float eps = 0.0f;
  Prologue kind = Prologue::None;
  bool vec = false;  // x, gate, norm 16-byte aligned; n_in and chunk multiples of 4
  int n_sums = 0;    // shared floats for the virtual-warp sums: (n_in / chunk) * norm_warps(chunk)
  int n_scales = 0;  // shared floats for the scales: n_in / chunk
};

template <Prologue P>
__device__ __forceinline__ float prologue_value(float x, float g, float w, float scale) {
  if constexpr (P == Prologue::None) {
    return x;
  } else if constexpr (P == Prologue::RmsNorm) {
    return x * scale * w;  // norm.cu: xr[i] * scale * w[i]
  } else if constexpr (P == Prologue::HeadRmsNormSiluGate) {
    const float n = x * scale * w;  // the rms_norm kernel's output...
    return n * detail::silu(g);     // ...through binary SiluMul: x * silu(g)
  } else if constexpr (P == Prologue::SigmoidGate) {
    return x * detail::sigmoid(g);  // binary SigmoidMul
  } else if constexpr (P == Prologue::HeadRmsNormMulGate) {
    const float n = x * scale * w;
    return n * g;  // binary Mul
  } else {
    return x * g;  // MulGate: binary Mul
  }
}

// Asks L1 for every 128-byte line of p[0, n) (the CTA's threads share the lines). A hint.
__device__ __forceinline__ void prefetch_l1_lines(const float* p, int n) {
  const int lines = (n + 31) / 32;
  for (int l = threadIdx.x; l < lines; l += blockDim.x) {
    asm volatile("prefetch.global.L1 [%0];" ::"l"(p + 32 * l));
  }
}

// The prologue's operands that the staging pass would otherwise fetch from L2 after the norm's
// scales (one more round trip after the sums' own): the norm weight (a constant: asked before
// pdl_wait) and the gate (written by an earlier kernel: asked after it, while the sums' loads
// are in flight). x itself was read by the sums just before; whether the staging pass finds it
// in L1 was not measured (the Q1_0 GEMV's direct prologue, re-reading x after the sums, took
// as long as staging did: gemv_lab, H200, 2026-12-04).
// Measured (H200, 2026-12-01, the decode step's timeline): gate+up 14.35 -> 13.43 µs, tg128
// 280.74 -> 284.49; qkv+z, q+k+v and ssm_out unchanged within noise, where the same round trip
// was predicted to go. Why only gate+up gains is not understood yet.
__device__ __forceinline__ void prologue_prefetch_constants(const PrologueArgs& p) {
  if (p.norm != nullptr) prefetch_l1_lines(p.norm, p.chunk);
}
__device__ __forceinline__ void prologue_prefetch_inputs(const PrologueArgs& p) {
  if (p.gate != nullptr && p.chunk != 0) prefetch_l1_lines(p.gate, p.n_in);
}

// prologue_sums' mark where nothing traces it.
struct NoMark {
  __device__ void operator()(int) const {}
};
// The norm's sums of squares of every virtual warp into sums[] (norm.cuh's canonical order),
// then a barrier: every sum is in shared memory when it returns. Every thread of the CTA calls
// it (nothing happens without a norm; the condition is uniform), and mark(k) at two points:
// its own warps' sums done, past the barrier (the lab's timeline events, matmul_q1_0.cu's
// traced GEMV). A warp loads up to kBatch virtual warps' tiles before adding any (one round
// trip to L2 per batch, not per virtual warp: ssm_out's 48 head norms on 18 warps were three
// dependent rounds). The Q1_0 GEMV's direct prologue sums its own eighths instead
// (GemvCta::eighth_sums).
template <class Mark = NoMark>
__device__ __forceinline__ void prologue_sums(const PrologueArgs& p, float* sums,
                                              const Mark& mark = Mark{}) {
  constexpr int kBatch = 4;
  if (p.chunk == 0) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const int per_chunk = norm::norm_warps(p.chunk), n_chunks = p.n_in / p.chunk;
  const int total = n_chunks * per_chunk;
  if (norm::one_tile(p.chunk)) {
    for (int v0 = warp; v0 < total; v0 += kBatch * n_warps) {  // warp-uniform: converged
      float t[kBatch][norm::kPerThread];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int v = v0 + b * n_warps, c = v / per_chunk;
        if (v < total) {
          norm::load_tile(p.x + int64_t(c) * p.chunk, p.chunk, v - c * per_chunk, 0, t[b]);
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int v = v0 + b * n_warps;
        if (v >= total) break;
        const float s = detail::warp_sum(norm::add_tile_squares(t[b], 0.0f));
        if (lane == 0) sums[v] = s;
      }
    }
  } else {
    for (int v = warp; v < total; v += n_warps) {  // warp-uniform: converged
      const int c = v / per_chunk;
      const float s =
          norm::virtual_warp_sum_squares(p.x + int64_t(c) * p.chunk, p.chunk, v - c * per_chunk);
      if (lane == 0) sums[v] = s;
    }
  }
  mark(0);
  __syncthreads();  // every virtual warp's sum is in shared memory before a chunk adds them
  mark(1);
}

// The norm scale of chunk c from prologue_sums' sums: what the rms_norm kernel computes.
__device__ __forceinline__ float prologue_chunk_scale(const PrologueArgs& p, const float* sums,
                                                      int c) {
  const int per_chunk = norm::norm_warps(p.chunk);
  return norm::rms_scale(norm::combine_warp_sums(sums + c * per_chunk, per_chunk), p.chunk, p.eps);
}

// The norm scales of every chunk into scales[] from prologue_sums' sums, then a barrier. Every
// thread of the CTA calls it.
__device__ __forceinline__ void prologue_scales_of_sums(const PrologueArgs& p, const float* sums,
                                                        float* scales) {
  if (p.chunk == 0) return;
  for (int c = threadIdx.x; c < p.n_in / p.chunk; c += blockDim.x) {
    scales[c] = prologue_chunk_scale(p, sums, c);
  }
  __syncthreads();  // the scales are written before the staging pass reads them
}

// The norm scales of every chunk into scales[] (sums[] is scratch).
__device__ __forceinline__ void prologue_scales(const PrologueArgs& p, float* sums, float* scales) {
  prologue_sums(p, sums);
  prologue_scales_of_sums(p, sums, scales);
}

// p(x) of elements i..i+3 (zeros past n_in).
template <Prologue P, bool kVec>
__device__ __forceinline__ float4 stage_value(const PrologueArgs& p, int i, const float* scales) {
  constexpr bool kGate = model::prologue_gated(P);
  constexpr bool kNorm = model::prologue_normed(P);
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if constexpr (kVec) {
    if (i < p.n_in) {  // n_in is a multiple of 4: the whole float4 is inside
      const float4 x4 = *reinterpret_cast<const float4*>(p.x + i);
      float4 g4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), w4 = g4;
      float scale = 0.0f;
      if constexpr (kGate) g4 = *reinterpret_cast<const float4*>(p.gate + i);
      if constexpr (kNorm) {
        const int h = P == Prologue::RmsNorm ? 0 : p.head.div(i);  // chunk % 4 == 0
        w4 = *reinterpret_cast<const float4*>(p.norm + (i - h * p.chunk));
        scale = scales[h];
      }
      v[0] = prologue_value<P>(x4.x, g4.x, w4.x, scale);
      v[1] = prologue_value<P>(x4.y, g4.y, w4.y, scale);
      v[2] = prologue_value<P>(x4.z, g4.z, w4.z, scale);
      v[3] = prologue_value<P>(x4.w, g4.w, w4.w, scale);
    }
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = i + e;
      if (j >= p.n_in) break;
      float g = 0.0f, w = 0.0f, scale = 0.0f;
      if constexpr (kGate) g = p.gate[j];
      if constexpr (kNorm) {
        const int h = P == Prologue::RmsNorm ? 0 : p.head.div(j);
        w = p.norm[j - h * p.chunk];
        scale = scales[h];
      }
      v[e] = prologue_value<P>(p.x[j], g, w, scale);
    }
  }
  return make_float4(v[0], v[1], v[2], v[3]);
}

// store(f, v) receives float4 f = p(x)[4f, 4f + 4) for f < n_stage / 4 (no barrier inside).
// Each thread computes kStageBatch float4s before it stores any, so that their loads are in
// flight together: a store between two loads orders the second after it (the compiler cannot
// tell that the shared-memory stage and the global x do not alias). Measured on the H200: the
// two-launch quantise kernel, batched the same way, made those GEMVs 6-22% faster; the
// one-launch GEMV's prologue did not change (its time is elsewhere: matmul_q1_0.cu).
constexpr int kStageBatch = 4;
template <Prologue P, bool kVec, class Store>
__device__ __forceinline__ void stage_pass(const PrologueArgs& p, int n_stage, const float* scales,
                                           const Store& store, int first4) {
  const int n4 = n_stage / 4;
  for (int f0 = first4 + threadIdx.x; f0 < n4; f0 += kStageBatch * blockDim.x) {
    float4 out[kStageBatch];
#pragma unroll
    for (int b = 0; b < kStageBatch; ++b) {
      out[b] = stage_value<P, kVec>(p, 4 * (f0 + b * static_cast<int>(blockDim.x)), scales);
    }
#pragma unroll
    for (int b = 0; b < kStageBatch; ++b) {
      const int f = f0 + b * static_cast<int>(blockDim.x);
      if (f < n4) store(f, out[b]);
    }
  }
}

template <Prologue P, class Store>
__device__ __forceinline__ void stage_as(const PrologueArgs& p, int n_stage, const float* scales,
                                         const Store& store, int first4) {
  return p.vec ? stage_pass<P, true>(p, n_stage, scales, store, first4)
               : stage_pass<P, false>(p, n_stage, scales, store, first4);
}

// Float4s [first4, n_stage / 4) of p(x) (first4 > 0: the rest came as codes).
template <class Store>
__device__ __forceinline__ void prologue_stage(const PrologueArgs& p, int n_stage,
                                               const float* scales, const Store& store,
                                               int first4 = 0) {
  switch (p.kind) {
    case Prologue::None:
      return stage_as<Prologue::None>(p, n_stage, scales, store, first4);
    case Prologue::RmsNorm:
      return stage_as<Prologue::RmsNorm>(p, n_stage, scales, store, first4);
    case Prologue::HeadRmsNormSiluGate:
      return stage_as<Prologue::HeadRmsNormSiluGate>(p, n_stage, scales, store, first4);
    case Prologue::SigmoidGate:
      return stage_as<Prologue::SigmoidGate>(p, n_stage, scales, store, first4);
    case Prologue::HeadRmsNormMulGate:
      return stage_as<Prologue::HeadRmsNormMulGate>(p, n_stage, scales, store, first4);
    case Prologue::MulGate:
      return stage_as<Prologue::MulGate>(p, n_stage, scales, store, first4);
  }
}

// The epilogue's operands (host: epilogue_args).
struct EpilogueArgs {
  Epilogue kind = Epilogue::Store;
  float* y[kMaxFusedMatrices] = {};
  int silu_mat = -1;  // FusedGemv::silu_mat
  // ConvSilu: matrix 0's rows are the conv's channels (FusedGemv's conv_* fields).
  const float* conv_w = nullptr;  // [channels][conv_kernel]
  float* conv_state = nullptr;    // [conv_kernel - 1][channels]
  int conv_kernel = 0;            // 1..model::kMaxFusedConvKernel
  int channels = 0;
};

// A conv channel's taps (ConvSilu): its weights, current tap last, and its history (the slot's
// conv state, oldest first).
struct ConvTaps {
  float w[model::kMaxFusedConvKernel];
  float h[model::kMaxFusedConvKernel - 1];
};
constexpr int kConvTapFloats = 2 * model::kMaxFusedConvKernel;  // a row's taps in shared memory

// A channel's taps from wherever they are held: w_at(j) for j <= hist, h_at(j) for j < hist,
// zeros past them (the one fill of ConvTaps: from global memory or from shared memory).
template <class W, class H>
__device__ __forceinline__ ConvTaps gather_conv_taps(int conv_kernel, const W& w_at,
                                                     const H& h_at) {
  ConvTaps t;
  const int hist = conv_kernel - 1;
#pragma unroll
  for (int j = 0; j < model::kMaxFusedConvKernel; ++j) {
    t.w[j] = j <= hist ? w_at(j) : 0.0f;
    if (j < model::kMaxFusedConvKernel - 1) t.h[j] = j < hist ? h_at(j) : 0.0f;
  }
  return t;
}

__device__ __forceinline__ ConvTaps load_conv_taps(const EpilogueArgs& e, int64_t c) {
  return gather_conv_taps(
      e.conv_kernel, [&](int j) { return e.conv_w[c * e.conv_kernel + j]; },
      [&](int j) { return e.conv_state[j * int64_t(e.channels) + c]; });
}

// The same taps copied into dst[kConvTapFloats] of shared memory by cp.async (w at 0, h at
// kMaxFusedConvKernel), for a kernel with no registers to spare: issued long before the
// epilogue, they cost no register while in flight (held in registers across the Q1_0 GEMV's
// dot products they made it spill). The issuing thread reads them back (conv_taps_arrived).
__device__ __forceinline__ void issue_conv_taps(const EpilogueArgs& e, int64_t c, float* dst) {
  const auto copy = [](float* to, const float* from) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(
                     static_cast<uint32_t>(__cvta_generic_to_shared(to))),
                 "l"(from)
                 : "memory");
  };
  const int hist = e.conv_kernel - 1;
  for (int j = 0; j <= hist; ++j) copy(dst + j, e.conv_w + c * e.conv_kernel + j);
  for (int j = 0; j < hist; ++j) {
    copy(dst + model::kMaxFusedConvKernel + j, e.conv_state + j * int64_t(e.channels) + c);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}
__device__ __forceinline__ ConvTaps conv_taps_arrived(const float* src, int conv_kernel) {
  asm volatile("cp.async.wait_all;" ::: "memory");
  return gather_conv_taps(
      conv_kernel, [&](int j) { return src[j]; },
      [&](int j) { return src[model::kMaxFusedConvKernel + j]; });
}

// The epilogue of one output row of matrix m: s0 = W_m·p(x), s1 = W_1·p(x) for a pair; taps:
// the row's conv taps (ConvSilu, m = 0; else unused). Returns the value stored in y[m][row].
// The expressions are elementwise.cu's functors: AddOp `y + x` (y the residual), SiluMulOp
// `x * silu(g)` with x = up (W_1) and g = gate (W_0); ConvSilu is conv.cu's decode step with
// SiLU (conv::channel_sum, then the history shifted into the state).
__device__ __forceinline__ float epilogue_store(const EpilogueArgs& e, int m, int64_t row, float s0,
                                                float s1, const ConvTaps& taps) {
  switch (e.kind) {
    case Epilogue::Store:
      return e.y[m][row] = m == e.silu_mat ? detail::silu(s0) : s0;
    case Epilogue::AddInto:
      return e.y[0][row] = e.y[0][row] + s0;
    case Epilogue::SiluMulPair:
      return e.y[0][row] = s1 * detail::silu(s0);
    case Epilogue::ConvSilu: {
      if (m != 0) return e.y[m][row] = m == e.silu_mat ? detail::silu(s0) : s0;
      const int hist = e.conv_kernel - 1;
      float wh[model::kMaxFusedConvKernel - 1];
#pragma unroll
      for (int j = 0; j < model::kMaxFusedConvKernel - 1; ++j) wh[j] = taps.w[j];
      float w_cur = taps.w[0];
#pragma unroll
      for (int j = 1; j < model::kMaxFusedConvKernel; ++j) w_cur = j == hist ? taps.w[j] : w_cur;
      const float y = e.y[0][row] = detail::silu(conv::channel_sum(w_cur, s0, wh, taps.h, hist));
#pragma unroll
      for (int j = 0; j < model::kMaxFusedConvKernel - 1; ++j) {
        if (j < hist) {
          e.conv_state[j * int64_t(e.channels) + row] = j + 1 < hist ? taps.h[j + 1] : s0;
        }
      }
      return y;
    }
  }
  return 0.0f;
}

// Host side of a fused launch (matmul.cu): the prologue's arguments for this FusedGemv (validated
// by the caller), and the occupancy of a kernel shape (cached).
PrologueArgs prologue_args(const FusedGemv& f);
EpilogueArgs epilogue_args(const FusedGemv& f);
int occupancy(const void* kernel, int threads, size_t smem);

// ---------------------------------------------------------------------------------------------
// The chunked formats' fused decode GEMV: persistent CTAs (one or two per SM) each stage p(x)
// in shared memory once, then stride over units of one row group (32 rows) of one matrix —
// of both matrices for SiluMulPair, so that a CTA holds a row's gate and up sums. A unit is
// chunked_kernel's work for that group, through the same chunked_dot with the same warps and
// chunk ranges (chunked_warps(n_chunks)) and the same warp-order sum, reading x from shared
// memory: bit-identical to matmul() on the staged vector, hence to the unfused sequence.
//
// Before waiting for the previous kernel (PDL), each warp asks L2 for its first unit's weights
// (they never depend on that kernel) and keeps one unit ahead while it works.
//
// Expected cost of the prologue (not yet measured): one pass over x (plus gate / norm) from L2,
// 20-70 KB per CTA, ~0.3-0.6 us per CTA for n_in 5120-17408, overlapping the first unit's
// weight stream.

struct ChunkedFusedArgs {
  const uint4* codes[kMaxFusedMatrices];    // [n_groups][n_chunks][32] per matrix
  const __half* scales[kMaxFusedMatrices];  // [n_groups][n_blocks][32] or null
  int unit_end[kMaxFusedMatrices];  // units [unit_end[m-1], unit_end[m]) are matrix m's groups
  int n_out[kMaxFusedMatrices];
  int n_units, n_chunks, n_blocks, chunks_per_warp, n_stage;
  EpilogueArgs epi;
  PrologueArgs pro;
};

// grid: persistent CTAs; block 32 * chunked_warps(n_chunks); dynamic shared memory
// (n_stage + pro.n_sums + pro.n_scales) floats.
template <class F>
__global__ void __launch_bounds__(kMaxWarps * 32)
    chunked_fused_kernel(const __grid_constant__ ChunkedFusedArgs a) {
  constexpr int kSub = sub_elems<F>();
  extern __shared__ float4 staged[];  // p(x) [n_stage / 4], then the norm's sums and scales
  __shared__ float red[2][kMaxWarps][32];
  float* sums = reinterpret_cast<float*>(staged) + a.n_stage;
  float* scales = sums + a.pro.n_sums;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const int c_begin = min(a.n_chunks, warp * a.chunks_per_warp);
  const int c_end = min(a.n_chunks, c_begin + a.chunks_per_warp);
  const int n_sub = a.epi.kind == Epilogue::SiluMulPair ? 2 : 1;
  const auto locate = [&](int u, int& m, int& group) {
    m = 0;
    while (u >= a.unit_end[m]) ++m;
    group = u - (m > 0 ? a.unit_end[m - 1] : 0);
  };
  // This warp's weights of unit u into L2 (lane 0; a hint).
  const auto prefetch_unit = [&](int u) {
    if (lane != 0 || u >= a.n_units) return;
    int m, group;
    locate(u, m, group);
    for (int ms = 0; ms < n_sub; ++ms) {
      const int mm = n_sub == 2 ? ms : m;
      prefetch_chunks<F>(
          a.codes[mm] + int64_t(group) * a.n_chunks * 32,
          F::kChunksPerBlock > 0 ? a.scales[mm] + int64_t(group) * a.n_blocks * 32 : nullptr,
          c_begin, c_end);
    }
  };

  pdl_launch_dependents();  // the next kernel may start its own weight prefetch
  prefetch_unit(blockIdx.x);
  prologue_prefetch_constants(a.pro);
  pdl_wait();  // x, gate and the residual come from earlier kernels; the weights did not
  prologue_prefetch_inputs(a.pro);
  prologue_scales(a.pro, sums, scales);
  prologue_stage(a.pro, a.n_stage, scales, [&](int f, float4 v) { staged[f] = v; });
  __syncthreads();  // p(x) is staged before any warp reads it

  const float* xs = reinterpret_cast<const float*>(staged);
  for (int u = blockIdx.x; u < a.n_units; u += gridDim.x) {
    prefetch_unit(u + gridDim.x);
    int m, group;
    locate(u, m, group);
    for (int ms = 0; ms < n_sub; ++ms) {
      const int mm = n_sub == 2 ? ms : m;
      const uint4* codes = a.codes[mm] + int64_t(group) * a.n_chunks * 32 + lane;
      const __half* sc =
          F::kChunksPerBlock > 0 ? a.scales[mm] + int64_t(group) * a.n_blocks * 32 + lane : nullptr;
      float acc[1];
      chunked_dot<F, 1>(
          codes, sc, c_begin, c_end, 1,
          [&](int, int k, float(&xv)[kSub]) {
#pragma unroll
            for (int i = 0; i < kSub / 4; ++i) {  // a broadcast: every lane reads the same k
              const float4 v = reinterpret_cast<const float4*>(xs + k)[i];
              xv[4 * i] = v.x;
              xv[4 * i + 1] = v.y;
              xv[4 * i + 2] = v.z;
              xv[4 * i + 3] = v.w;
            }
          },
          acc);
      red[ms][warp][lane] = acc[0];
    }
    __syncthreads();  // every warp's partial sums are in shared memory before they are added
    if (threadIdx.x < 32) {
      const int64_t row = int64_t(group) * 32 + lane;
      if (row < a.n_out[m]) {
        // Loaded before the sums so that their latency overlaps the warp-order additions.
        const bool conv = a.epi.kind == Epilogue::ConvSilu && m == 0;
        const ConvTaps taps = conv ? load_conv_taps(a.epi, row) : ConvTaps{};
        float s[2] = {0.0f, 0.0f};
        for (int ms = 0; ms < n_sub; ++ms) {
          float sum = 0.0f;
          for (int w = 0; w < n_warps; ++w) sum += red[ms][w][lane];  // chunked_kernel's order
          s[ms] = sum;
        }
        epilogue_store(a.epi, m, row, s[0], s[1], taps);
      }
    }
    __syncthreads();  // the sums are read before the next unit overwrites them
  }
}

// One launch of the fused GEMV for chunked format F (f validated by matmul_fused).
template <class F>
unsigned chunked_fused(const FusedGemv& f, cudaStream_t s) {
  const GpuMatrix& w0 = *f.w[0];
  ChunkedFusedArgs a{};
  a.n_chunks = static_cast<int>(w0.n_col_tiles);
  a.n_blocks = F::kChunksPerBlock > 0 ? a.n_chunks / F::kChunksPerBlock : 0;
  const ChunkRanges ranges = chunk_ranges(a.n_chunks);
  const int warps = ranges.n;
  a.chunks_per_warp = ranges.per;
  a.n_stage = a.n_chunks * F::kElems;  // a multiple of 4
  a.epi = epilogue_args(f);
  const bool pair = f.epilogue == Epilogue::SiluMulPair;
  int units = 0;
  for (int i = 0; i < kMaxFusedMatrices; ++i) {
    if (i < f.n) {
      const GpuMatrix& w = *f.w[i];
      a.codes[i] = w.codes.as<const uint4>();
      a.scales[i] = F::kChunksPerBlock > 0 ? w.scales.as<const __half>() : nullptr;
      a.n_out[i] = static_cast<int>(w.n_out);
      units = pair ? static_cast<int>(w.n_row_tiles) : units + static_cast<int>(w.n_row_tiles);
    }
    a.unit_end[i] = units;  // past f.n: never reached (u < n_units)
  }
  a.n_units = units;
  a.pro = prologue_args(f);
  const size_t smem = sizeof(float) * (size_t(a.n_stage) + a.pro.n_sums + a.pro.n_scales);
  const auto kernel = &chunked_fused_kernel<F>;
  if (smem > allow_max_smem(reinterpret_cast<const void*>(kernel))) {
    fail("cuda matmul_fused '{}' [{} x {}]: the staged input needs {} bytes of shared memory",
         w0.name, w0.n_out, w0.n_in, smem);
  }
  const int threads = 32 * warps;
  const int per_sm = occupancy(reinterpret_cast<const void*>(kernel), threads, smem);
  if (per_sm < 1) {
    fail("cuda matmul_fused '{}' [{} x {}]: no CTA of {} threads fits", w0.name, w0.n_out, w0.n_in,
         threads);
  }
  const int64_t ctas = int64_t(std::min(per_sm, 2)) * usable_sms(f);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(a.n_units, ctas)));
  launch(kernel, grid, dim3(threads), smem, true, s, a);
  CUDA_CHECK_LAUNCH();
  return grid.x;
}

// Host repack into the chunked layout. chunk(row, c, out) writes the 16 bytes of chunk c of a
// stored row (zero past the row); scale(row, b) returns the fp16 bits of block b's scale.
struct ChunkedFormat {
  int64_t elems_per_chunk;
  int64_t chunks_per_block;  // 0: no scales
  void (*chunk)(const uint8_t* row, size_t row_bytes, int64_t c, uint8_t* out);
  uint16_t (*scale)(const uint8_t* row, int64_t b);
};
GpuMatrix upload_chunked(const model::Matrix& m, const ChunkedFormat& f, cudaStream_t s);
// For block formats: chunk c is bytes [16 (c % kChunksPerBlock), +16) of the codes of block
// c / kChunksPerBlock (after its 2-byte fp16 scale).
template <size_t kBlockBytes, int kChunksPerBlock>
void block_chunk(const uint8_t* row, size_t /*row_bytes*/, int64_t c, uint8_t* out) {
  std::memcpy(out, row + (c / kChunksPerBlock) * kBlockBytes + 2 + 16 * (c % kChunksPerBlock), 16);
}
template <size_t kBlockBytes>
uint16_t block_scale(const uint8_t* row, int64_t b) {
  uint16_t d;
  std::memcpy(&d, row + b * kBlockBytes, sizeof d);
  return d;
}

// ---------------------------------------------------------------------------------------------
// Family entry points (each defined in its matmul_<family>.cu)

GpuMatrix upload_float(const model::Matrix& m, cudaStream_t s);  // F32, F16, BF16
void matmul_float(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
                  int64_t n_tokens, cudaStream_t s);
unsigned matmul_fused_float(const FusedGemv& f, cudaStream_t s);
GpuMatrix upload_q8(const model::Matrix& m, cudaStream_t s);  // Q8_0, Q4_0
void matmul_q8(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
               int64_t n_tokens, cudaStream_t s);
unsigned matmul_fused_q8(const FusedGemv& f, cudaStream_t s);
GpuMatrix upload_2bit(const model::Matrix& m, cudaStream_t s);  // Q2_0, PQ2_0
void matmul_2bit(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
                 int64_t n_tokens, cudaStream_t s);
unsigned matmul_fused_2bit(const FusedGemv& f, cudaStream_t s);

// Q1_0 (matmul_q1_0.cu). One token: ONE kernel that quantises the activation itself (every CTA,
// into shared memory) and runs the product — matmul() and matmul_fused. Several tokens, and
// the lab's two-launch path: a small kernel quantises into the workspace, then the product
// kernel. The variants exist for the lab (bench/gemv_lab.cu) until it has picked one; matmul()
// uses the default.
// kBmma<Q>: b1 mma, Q quads (Q * 512 weights of each of 16 rows) per warp, the next row tile's
// loads issued before the current one is computed; *Flat: without that prefetch (fewer
// registers, more warps); kDp4a2: dp4a arithmetic, 2 quads, prefetch; kImma: int8 tensor
// cores on the dp4a codes, 8 row tiles x 32 tokens a CTA (the prefill product); kImmaPairs:
// the same with two token groups' mma chains at once (the lab's candidate; the same bits). Flat and
// prefetch variants of one Q add in the same order (bit-identical); the one-launch kernel
// exists for kBmma2 and kBmma4 and is bit-identical to their two-launch path.
enum class Q1Variant { kBmma2, kBmma2Flat, kBmma4, kBmma4Flat, kDp4a2, kImma, kImmaPairs };
struct Q1Options {
  Q1Variant variant = Q1Variant::kBmma2;
  bool pdl = true;  // the GEMV starts its weight loads while the previous kernel runs
  // One token: quantise inside the GEMV (one launch; kBmma2 / kBmma4 only) instead of the
  // quantise kernel + product kernel.
  bool one_launch = false;
};
const char* q1_variant_name(Q1Variant v);
// The variant matmul() uses for this shape (one_launch set for one token when it is the
// faster path; n_out 0: the one-launch variant, as matmul_fused runs it; kImma for batches
// where it measured faster: imma_wins).
Q1Options q1_default_options(int64_t n_in, int64_t n_out, int64_t n_tokens = 1);
GpuMatrix upload_q1_0(const model::Matrix& m, cudaStream_t s);
size_t q1_0_workspace_bytes(int64_t n_in, int64_t n_tokens);
// Quantises x into act (q1_0_workspace_bytes(n_in, n_tokens) bytes) for the given variant.
void q1_0_quantize(const GpuMatrix& w, const float* x, int64_t ldx, int64_t n_tokens, void* act,
                   Q1Variant v, cudaStream_t s);
// The product from already quantised activations.
void q1_0_product(const GpuMatrix& w, const void* act, float* y, int64_t ldy, int64_t n_tokens,
                  const Q1Options& o, cudaStream_t s);
// "5 warps/tile x 1 steps of 2 quads, ..." : how the product kernel is cut for this shape.
std::string q1_0_describe(const GpuMatrix& w, int64_t n_tokens, const Q1Options& o);
void matmul_q1_0(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
                 int64_t n_tokens, MatmulWorkspace& ws, const Q1Options& o, cudaStream_t s);
// matmul()'s one-token GEMV through the two-launch path (quantise kernel + product kernel) of
// the default variant: the op checks compare the one-launch kernel with it bit for bit
// (checks_matmul.cpp declares it again; it is C++-clean).
void q1_0_two_launch_gemv(const GpuMatrix& w, const float* x, float* y, MatmulWorkspace& ws,
                          cudaStream_t s);
// How many of the n_tokens x n_out floats Q1Variant::kImmaPairs's product gives other than
// kImma's (the op checks require none; declared again there, as above).
int64_t q1_0_imma_pairs_diff(const GpuMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
                             MatmulWorkspace& ws, cudaStream_t s);
// The lab's timeline of one one-launch GEMV (plain_gemv, or a fused one with its prologue and
// epilogue; o: a one-launch variant): launches it (as matmul_fused_q1_0) with thread 0 of
// every CTA writing globaltimer stamps (ns) to trace[cta * kGemvTraceEvents + e] and its SM's
// clock64 to trace[(grid + cta) * kGemvTraceEvents + e] (GemvTraceEvent in matmul_q1_0.cu);
// returns the grid size. Unwritten slots keep their value; trace null: an untraced launch.
constexpr int kGemvTraceEvents = 20;
unsigned q1_0_gemv_traced(const FusedGemv& f, const Q1Options& o, uint64_t* trace, cudaStream_t s);
// What timeline event e is ("waited", "slot 1 barrier", ...).
std::string q1_0_trace_event(int e);
// Q1_0 on f32 activations (GpuMatrix::f32_activations): the chunked layout and kernels.
GpuMatrix upload_q1_0_f32act(const model::Matrix& m, cudaStream_t s);
void matmul_q1_0_f32act(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
                        int64_t n_tokens, cudaStream_t s);
unsigned matmul_fused_q1_0_f32act(const FusedGemv& f, cudaStream_t s);
// The fused decode GEMV of Q1_0 matrices (f validated by matmul_fused) with options o (variant
// kBmma2 or kBmma4; matmul_fused passes q1_default_options(n_in, 0)).
unsigned matmul_fused_q1_0(const FusedGemv& f, const Q1Options& o, cudaStream_t s);
int codes_out_blocks_q1_0(const FusedGemv& f, const Q1Options& o);  // q1_codes_out_blocks
// Why f (its fold_* set) cannot run with o (empty: it can): q1_fold_refusal's last check.
std::string fold_refusal_q1_0(const FusedGemv& f, const Q1Options& o);

}  // namespace gdn::cuda::mm
