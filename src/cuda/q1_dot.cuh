// The Q1_0 products' per-block arithmetic and the pieces around it (the cut of a row into
// slices, weight loads, lane and slice sums), shared by the kernels that must agree bit for bit:
// the GEMVs (matmul_q1_0.cu, whose header comment derives the arithmetic and the weight layout)
// and the GEMV chain (q1_chain.cu; the split-K MLP of branch exp/s27-split-k-mlp included this
// header too).
#pragma once

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cuda/act_quantize.cuh"
#include "cuda/matmul.cuh"

namespace gdn::cuda::mm {

constexpr int kBlock = 128;     // Q1_0 block = the b1 mma's k
constexpr int kTileRows = 16;   // the mma's m
constexpr int kQuadBlocks = 4;  // blocks per quad (one 16-byte scale load per lane)

// Warps per row tile (slices of kQ quads) a CTA may hold: n_in <= max_slices * kQ * 512 in one
// chunk, i.e. 18432 for kQ = 2 and 24576 for kQ = 4 (Bonsai's longest rows are 17408). The
// bound sets the kernels' register budget: 65536 / (32 * max_slices).
constexpr int max_slices(int kQ) {
  return kQ == 2 ? 18 : 12;
}
// Slices a row is cut into at most (q1_cut; <= max_slices). Six for kQ = 2: the decode step's
// ffn_down (17408 -> 5120) took 10.60 µs at 17 slices of 2 chunks (one team per CTA, three
// rounds of slots), 9.66 at 9 of 4 (two teams) and 9.23 at 6 of 6 (three teams, one round):
// fewer reductions, barriers and epilogues for the same dots; tg128 272.3 -> 278.7 (H200,
// 2026-12-01). Five cuts the 6144-long rows into 3 slices of 2 chunks (tg128 265.0), three the
// 5120-long ones too (243.3): a short row wants its quads in flight at once.
constexpr int cut_slices(int kQ) {
  return kQ == 2 ? 6 : max_slices(kQ);
}

// How n_in is cut for kQ quads per chunk: slices (warps per row tile) of `chunks` chunks. A
// function of n_in (and the variant) only — the per-row summation order of every one-token
// product over n_in (the GEMVs and the chain).
struct Q1Cut {
  int slices, chunks;
};

inline Q1Cut q1_cut(int kQ, int64_t n_quads) {
  const int64_t chunks = std::max<int64_t>(1, ceil_div(n_quads, int64_t(kQ) * cut_slices(kQ)));
  return {static_cast<int>(ceil_div(n_quads, kQ * chunks)), static_cast<int>(chunks)};
}

// Activation loads: from the workspace (read-only for the whole kernel: the non-coherent path)
// or from shared memory.
template <bool kShared>
__device__ __forceinline__ uint32_t ld_act(const uint32_t* p) {
  if constexpr (kShared) {
    return *p;
  } else {
    return __ldg(p);
  }
}
template <bool kShared>
__device__ __forceinline__ uint4 ld_act4(const uint4* p) {
  if constexpr (kShared) {
    return *p;
  } else {
    return __ldg(p);
  }
}
template <bool kShared>
__device__ __forceinline__ ActMeta load_meta(const ActMeta* p) {
  int2 v;
  if constexpr (kShared) {
    v = *reinterpret_cast<const int2*>(p);
  } else {
    v = __ldg(reinterpret_cast<const int2*>(p));
  }
  return ActMeta{__int_as_float(v.x), v.y};
}

// ---------------------------------------------------------------------------------------------
// Per-block arithmetic: this lane's share of the integer dot of one block for rows g and g+8.
// `act` points at the block's 32 activation words plus the lane's lane_offset().

struct BmmaMath {
  int w0, w1;  // 2 * plane weight of this lane's two D columns (planes 2t, 2t+1)
  __device__ explicit BmmaMath(int lane) {
    const int t = lane & 3;
    w0 = 2 << (2 * t);
    w1 = t == 3 ? -256 : 2 << (2 * t + 1);
  }
  // Its B fragment word: plane g of quarter t.
  __device__ static int lane_offset(int lane) { return (lane & 3) * 8 + (lane >> 2); }
  template <bool kShared>
  __device__ __forceinline__ void block(uint32_t a_lo, uint32_t a_hi, const uint32_t* act,
                                        int neg_sum, int& i_lo, int& i_hi) const {
    const uint32_t b = ld_act<kShared>(act);
    int c0, c1, c2, c3;
    asm("mma.sync.aligned.m16n8k128.row.col.s32.b1.b1.s32.and.popc {%0,%1,%2,%3}, {%4,%5}, "
        "{%6}, {%7,%7,%7,%7};"
        : "=r"(c0), "=r"(c1), "=r"(c2), "=r"(c3)
        : "r"(a_lo), "r"(a_hi), "r"(b), "r"(0));
    i_lo = c1 * w1 + (c0 * w0 + neg_sum);
    i_hi = c3 * w1 + (c2 * w0 + neg_sum);
  }
};

struct Dp4aMath {
  __device__ explicit Dp4aMath(int /*lane*/) {}
  __device__ static int lane_offset(int lane) { return (lane & 3) * 8; }  // the words of chunk t
  template <bool kShared>
  __device__ __forceinline__ void block(uint32_t a_lo, uint32_t a_hi, const uint32_t* act,
                                        int neg_sum, int& i_lo, int& i_hi) const {
    const uint4 q0 = ld_act4<kShared>(reinterpret_cast<const uint4*>(act));
    const uint4 q1 = ld_act4<kShared>(reinterpret_cast<const uint4*>(act) + 1);
    const uint32_t qk[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    int s_lo = 0, s_hi = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      s_lo = __dp4a(static_cast<int>((a_lo >> k) & 0x01010101u), static_cast<int>(qk[k]), s_lo);
      s_hi = __dp4a(static_cast<int>((a_hi >> k) & 0x01010101u), static_cast<int>(qk[k]), s_hi);
    }
    i_lo = 2 * s_lo + neg_sum;
    i_hi = 2 * s_hi + neg_sum;
  }
};

// ---------------------------------------------------------------------------------------------
// The product's pieces, shared by the two-launch kernel and the one-launch GEMV (so that their
// per-row float operations are the same code).

// One chunk of a row tile for this warp: kQ quads of bits (2 x 16 bytes each) and scales.
template <int kQ>
struct ChunkLoads {
  uint4 bits[kQ][2];
  uint4 scales[kQ];
};

// Weight loads: streamed from global memory, or from a copy in shared memory (the GEMV chain).
template <bool kShared>
__device__ __forceinline__ uint4 ld_weight(const uint4* p) {
  if constexpr (kShared) {
    return *p;
  } else {
    return ld_stream(p);
  }
}

// bits / scales: the chunk's first quad of this row tile, plus the lane (bits) / its group
// (scales); quads: how many of the chunk's kQ quads exist.
template <int kQ, bool kShared = false>
__device__ __forceinline__ void load_quads(const uint4* bits, const uint4* scales, int quads,
                                           ChunkLoads<kQ>& t) {
#pragma unroll
  for (int i = 0; i < kQ; ++i) {
    if (i < quads) {
      t.bits[i][0] = ld_weight<kShared>(bits + i * 64);
      t.bits[i][1] = ld_weight<kShared>(bits + i * 64 + 32);
      t.scales[i] = ld_weight<kShared>(scales + i * 8);
    }
  }
}

// One chunk of a row tile against one token: per-lane partial sums of rows g, g+8. act / meta:
// the chunk's first block (act plus the lane's offset); quads: how many of its kQ quads exist.
template <class Math, int kQ, bool kShared>
__device__ __forceinline__ float2 dot_chunk(const Math& m, const uint32_t* act, const ActMeta* meta,
                                            const ChunkLoads<kQ>& t, int quads, int lane) {
  float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int i = 0; i < kQ; ++i) {
    if (i >= quads) break;
    const uint32_t words[8] = {t.bits[i][0].x, t.bits[i][0].y, t.bits[i][0].z, t.bits[i][0].w,
                               t.bits[i][1].x, t.bits[i][1].y, t.bits[i][1].z, t.bits[i][1].w};
    const uint32_t halves[4] = {t.scales[i].x, t.scales[i].y, t.scales[i].z, t.scales[i].w};
#pragma unroll
    for (int j = 0; j < kQuadBlocks; ++j) {
      const int blk = i * kQuadBlocks + j;
      const ActMeta am = load_meta<kShared>(meta + blk);
      const int neg_sum = (lane & 3) == 0 ? -am.sum : 0;
      int i_lo, i_hi;
      m.template block<kShared>(words[2 * j], words[2 * j + 1], act + blk * 32, neg_sum, i_lo,
                                i_hi);
      __half2 h;
      std::memcpy(&h, &halves[j], sizeof h);
      const float2 dw = __half22float2(h);  // rows g, g+8
      acc.x = fmaf(static_cast<float>(i_lo), dw.x * am.d, acc.x);
      acc.y = fmaf(static_cast<float>(i_hi), dw.y * am.d, acc.y);
    }
  }
  return acc;
}

// Sum over the four lanes t of each row (every lane gets the same value).
__device__ __forceinline__ float2 sum_quad_lanes(float2 v) {
  v.x += __shfl_xor_sync(kFullMask, v.x, 1);
  v.y += __shfl_xor_sync(kFullMask, v.y, 1);
  v.x += __shfl_xor_sync(kFullMask, v.x, 2);
  v.y += __shfl_xor_sync(kFullMask, v.y, 2);
  return v;
}

// The slices' sums of one row added in slice order (s: the first slice's value; stride floats
// apart): the GEMV's last step, the same in both kernels.
__device__ __forceinline__ float sum_slices(const float* s, int slices, int stride) {
  float sum = 0.0f;
  for (int i = 0; i < slices; ++i) sum += s[i * stride];  // fixed order: deterministic
  return sum;
}

}  // namespace gdn::cuda::mm
