// Activation quantisation for the Q1_0 products: the one home of the formula (matmul_q1_0.cu
// says why the activations are quantised and how the products use the codes). Run by the
// two-launch path's quantise kernel and the one-launch GEMV's prologue (matmul_q1_0.cu), and by
// the kernels that hand a GEMV its input already quantised (the gate+up GEMV's codes out; the
// GDN recurrence's and attention's CodesOut, gdn.cu and attention.cu): every one of them
// quantises with these functions, so the codes are the same bits wherever they are made.
//
// Per 128-element block: d = amax / 127 (IEEE division), q = roundf(v / d) (0 when d = 0), and
// sum q; quant::quantize_activations_q8_128 is the CPU twin. Layout (per token): act[block][t*8
// + g] holds bit g of the codes of quarter t (bmma planes; dp4a: the codes themselves, see
// quantize_eighths), meta[block] = {d, sum}.
#pragma once

#include <cfloat>
#include <cstdint>

#include "cuda/kernel_util.cuh"

namespace gdn::cuda::mm {

struct alignas(8) ActMeta {
  float d;  // activation scale of the block
  int sum;  // sum of its codes
};

// Where float4 f of a staged activation vector sits in shared memory: 128-byte rows of 8
// float4 (one quarter block each), the column XORed with the row (mod 8). Eight consecutive
// staging threads store one row (a permutation of its 8 slots: no bank conflict), and eight
// consecutive eighth threads reading float4 2u (or 2u + 1) hit rows r, r + 1 at columns
// {0, 2, 4, 6} ^ r and ^ (r + 1): 8 different 16-byte slots (none).
__device__ __forceinline__ int stage_pos(int f) {
  return (f & ~7) | ((f ^ (f >> 3)) & 7);
}

// Low bytes of four words as one int8x4 word (a, b, c, d from the lowest byte up).
__device__ __forceinline__ uint32_t pack_low_bytes(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

// The codes of an eighth of a block (8 elements; d = amax / 127 of its block) as 2 int8x4
// words: byte e of w[k] = q[4k+e] = roundf(v[4k+e] / d) (0 when d = 0), as the CPU quantiser.
//
// Without 8 IEEE divisions (~10 instructions each): r = 1/d correctly rounded, t = v·r, and
// rint(t) through the 1.5·2^23 trick (whose low mantissa byte is the two's complement code).
// Why that equals roundf(v/d) unless t is within 2^-14 of a half-integer: for d in
// [FLT_MIN, 2^125] (r normal), |v| <= amax and d = fl(amax/127) give |v/d| <= 127.0001, so
// |t - v/d| <= |v/d|·(2^-24 + 2^-24 + 2^-48) < 2^-16 and |fl(v/d) - v/d| <= 2^-18 (half an ulp
// below 128): t and fl(v/d) differ by < 2^-15. If t is more than 2^-14 from every half-integer,
// fl(v/d) lies strictly on the same side of the same half-integers, so roundf(fl(v/d)) is the
// integer nearest t, with no tie. Otherwise (or for d outside that range, 0, inf or NaN) it
// returns true and the thread redoes its eight exactly (quantize_codes_exact). Checked on the
// host against roundf(v/d) for 2.4e7 values (many of them exact half-integer quotients) and by
// gdn ops' q1_quantize check against quant::quantize_activations_q8_128 on the GPU.
__device__ __forceinline__ bool quantize_codes_fast(const float (&v)[8], float d,
                                                    uint32_t (&w)[2]) {
  constexpr float kMagic = 12582912.0f;         // 1.5 * 2^23
  constexpr float kTieGuard = 0.5f - 0x1p-14f;  // |t - rint(t)| below this: not near a tie
  const float r = __frcp_rn(d);
  bool exact = !(d >= FLT_MIN && d <= 0x1p125f);
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    uint32_t m[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float t = __fmul_rn(v[4 * k + e], r);
      const float rounded = __fadd_rn(t, kMagic);  // rint(t) in the low mantissa bits
      exact |= !(fabsf(__fsub_rn(t, __fsub_rn(rounded, kMagic))) < kTieGuard);
      m[e] = __float_as_uint(rounded);
    }
    w[k] = pack_low_bytes(m[0], m[1], m[2], m[3]);
  }
  return exact;
}

// The codes by IEEE division: quantize_codes_fast's fallback.
__device__ __forceinline__ void quantize_codes_exact(const float (&v)[8], float d,
                                                     uint32_t (&w)[2]) {
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    uint32_t q[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      q[e] = static_cast<uint32_t>(d == 0.0f ? 0 : static_cast<int>(roundf(v[4 * k + e] / d)));
    }
    w[k] = pack_low_bytes(q[0], q[1], q[2], q[3]);
  }
}

// Transposes the 8x8 bit matrix in hi:lo (byte j = row j, bit c = column c) in place: byte c,
// bit j (Hacker's Delight transpose8, on 32-bit halves).
__device__ __forceinline__ void transpose8x8(uint32_t& lo, uint32_t& hi) {
  uint32_t t = (lo ^ (lo >> 7)) & 0x00AA00AAu;
  lo ^= t ^ (t << 7);
  t = (hi ^ (hi >> 7)) & 0x00AA00AAu;
  hi ^= t ^ (t << 7);
  t = (lo ^ (lo >> 14)) & 0x0000CCCCu;
  lo ^= t ^ (t << 14);
  t = (hi ^ (hi >> 14)) & 0x0000CCCCu;
  hi ^= t ^ (t << 14);
  t = (lo ^ (hi << 4)) & 0xF0F0F0F0u;
  lo ^= t;
  hi ^= t >> 4;
}

// The 4x4 byte matrix held by lanes j = lane % 4 of each group of four (lane j: word x, byte c)
// transposed: lane j returns the word whose byte m is byte j of lane m's x. Two butterfly steps
// (partner lane ^ 1, then ^ 2), one shuffle and one byte permute each; all 32 lanes must call.
__device__ __forceinline__ uint32_t transpose_bytes4(uint32_t x, int lane) {
  const uint32_t y = __shfl_xor_sync(detail::kFullMask, x, 1);
  // lane j even: (x0, y0, x2, y2); odd: (y1, x1, y3, x3) -> lanes 2i, 2i+1 hold columns 0,2 / 1,3
  const uint32_t z = __byte_perm(x, y, (lane & 1) ? 0x3715 : 0x6240);
  const uint32_t w = __shfl_xor_sync(detail::kFullMask, z, 2);
  return __byte_perm(z, w, (lane & 2) ? 0x3276 : 0x5410);
}

// Quantises eighths u[0..N) of a staged vector, N independent chains interleaved phase by
// phase so that one thread's shuffles and dependent arithmetic overlap (a chain is ~130
// dependent instructions with 12 shuffles: one per thread left the prologue latency-bound).
// Eighth u holds elements 8u..8u+7 (float4s 2u, 2u+1 at stage_pos) = element 32t + 8j.. of
// block u / 16, with quarter t = (u / 4) % 4 and j = u % 4. The sixteen eighths of a block
// must sit on sixteen aligned lanes (u[n] % 16 = lane % 16) and all 32 lanes must call it
// (shuffles). Out: this lane's two activation words of each eighth for act[block][t*8 + j] and
// act[block][t*8 + 4 + j], and the block's d and sum (on all sixteen lanes). The arithmetic of
// an eighth does not depend on N.
//   kPlanes (bmma): word g of quarter t is bit plane g of its 32 codes (bit i = bit g of code
//     32t + i): each lane's 8 codes become 8 plane bytes by an 8x8 bit transpose, and the four
//     lanes of a quarter swap bytes so that lane j holds planes j and 4 + j.
//   else (dp4a): word k of quarter t holds the codes 32t + 8b + k for b = 0..3: the four lanes
//     swap bytes of their code words directly.
// quantize_eighths with the 8 elements of eighth u[n] from load(n, e8) (staged or straight
// from memory).
template <bool kPlanes, int N, class Load>
__device__ __forceinline__ void quantize_eighths_from(const Load& load, int lane,
                                                      uint32_t (&out)[N][2], float (&d)[N],
                                                      int (&sum)[N]) {
  float v[N][8], amax[N];
#pragma unroll
  for (int n = 0; n < N; ++n) {
    float e8[8];
    load(n, e8);
    amax[n] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      v[n][e] = e8[e];
      amax[n] = fmaxf(amax[n], fabsf(e8[e]));
    }
  }
#pragma unroll
  for (int o = 1; o < 16; o <<= 1) {
#pragma unroll
    for (int n = 0; n < N; ++n)
      amax[n] = fmaxf(amax[n], __shfl_xor_sync(detail::kFullMask, amax[n], o));
  }
  uint32_t w[N][2];
  bool slow[N];
#pragma unroll
  for (int n = 0; n < N; ++n) {
    d[n] = amax[n] / 127.0f;  // fmaxf is exact in any order: every lane of the block has the same d
    slow[n] = quantize_codes_fast(v[n], d[n], w[n]);
  }
#pragma unroll
  for (int n = 0; n < N; ++n) {
    if (slow[n]) quantize_codes_exact(v[n], d[n], w[n]);
  }
  int s[N];
#pragma unroll
  for (int n = 0; n < N; ++n) {
    s[n] = __dp4a(static_cast<int>(w[n][1]), 0x01010101,
                  __dp4a(static_cast<int>(w[n][0]), 0x01010101, 0));
  }
#pragma unroll
  for (int o = 1; o < 16; o <<= 1) {
#pragma unroll
    for (int n = 0; n < N; ++n)
      s[n] += __shfl_xor_sync(detail::kFullMask, s[n], o);  // integers: exact
  }
#pragma unroll
  for (int n = 0; n < N; ++n) {
    sum[n] = s[n];
    if constexpr (kPlanes) transpose8x8(w[n][0], w[n][1]);  // byte c of w[c / 4]: plane c
    out[n][0] = transpose_bytes4(w[n][0], lane);
    out[n][1] = transpose_bytes4(w[n][1], lane);
  }
}

// The 8 floats of an eighth held as two float4s.
__device__ __forceinline__ void eighth_floats(float4 f0, float4 f1, float (&e8)[8]) {
  const float f[8] = {f0.x, f0.y, f0.z, f0.w, f1.x, f1.y, f1.z, f1.w};
#pragma unroll
  for (int e = 0; e < 8; ++e) e8[e] = f[e];
}
// The 8 floats of eighth u of a vector staged at stage_pos.
__device__ __forceinline__ void load_staged_eighth(const float4* stage, int u, float (&e8)[8]) {
  eighth_floats(stage[stage_pos(2 * u)], stage[stage_pos(2 * u + 1)], e8);
}

template <bool kPlanes, int N>
__device__ __forceinline__ void quantize_eighths(const float4* stage, const int (&u)[N], int lane,
                                                 uint32_t (&out)[N][2], float (&d)[N],
                                                 int (&sum)[N]) {
  quantize_eighths_from<kPlanes, N>(
      [&](int n, float(&e8)[8]) { load_staged_eighth(stage, u[n], e8); }, lane, out, d, sum);
}

// Stores eighth u's words and, from the block's first lane, its meta (act, meta: the vector's
// first block).
__device__ __forceinline__ void store_eighth(uint32_t* act, ActMeta* meta, int u,
                                             const uint32_t (&w)[2], float d, int sum) {
  uint32_t* dst = act + (u >> 4) * 32 + ((u >> 2) & 3) * 8 + (u & 3);
  dst[0] = w[0];
  dst[4] = w[1];
  if ((u & 15) == 0) meta[u >> 4] = ActMeta{d, sum};
}

// Eighths u0 + lane + n * stride (n < N) of a vector quantised into act / meta, their floats
// from load(u, e8) (all 32 lanes call it; eighths past n_eighths are computed on clamped copies
// and not stored).
template <int N, class Load>
__device__ __forceinline__ void quantise_eighths_at(const Load& load, uint32_t* act, ActMeta* meta,
                                                    int u0, int stride, int n_eighths, int lane) {
  int u[N], uc[N];
#pragma unroll
  for (int n = 0; n < N; ++n) {
    u[n] = u0 + lane + n * stride;
    uc[n] = min(u[n], n_eighths - 1);  // whole warps
  }
  uint32_t words[N][2];
  float d[N];
  int sum[N];
  quantize_eighths_from<true, N>([&](int n, float(&e8)[8]) { load(uc[n], e8); }, lane, words, d,
                                 sum);
#pragma unroll
  for (int n = 0; n < N; ++n) {
    if (u[n] < n_eighths) store_eighth(act, meta, u[n], words[n], d[n], sum[n]);
  }
}

// Blocks [first_block, n_blocks) of a vector quantised into act / meta by `threads` threads
// (whole warps; this one is thread tid), eighth u's floats from load(u, e8): two eighths per
// thread (threads apart: the same lane alignment), interleaved; one where the warp's second
// eighths would all lie past the end (every 5120-long GEMV at 4 teams), so that no warp spends
// half its quantising on clamped copies. Measured (H200, 2026-12-01): q+k+v 8.43 -> 7.99 µs,
// tg128 +0.5%, not the ~3% predicted: the phase is bound by its dependent chain (shuffles, a
// division, a transpose), and a second chain mostly hides in it. The caller synchronises
// before (where load reads what other threads wrote) and after.
template <class Load>
__device__ __forceinline__ void quantise_blocks(const Load& load, uint32_t* act, ActMeta* meta,
                                                int first_block, int n_blocks, int tid,
                                                int threads) {
  const int lane = tid & 31, n_eighths = n_blocks * 16;
  for (int u0 = first_block * 16 + (tid & ~31); u0 < n_eighths; u0 += 2 * threads) {
    if (u0 + threads < n_eighths) {
      quantise_eighths_at<2>(load, act, meta, u0, threads, n_eighths, lane);
    } else {
      quantise_eighths_at<1>(load, act, meta, u0, threads, n_eighths, lane);
    }
  }
}

// Quantises n_blocks (1 or 2) blocks staged at stage_pos from stage[0] with one warp (all 32
// lanes call it: eighth u on lane u; past the blocks, lanes repeat the first block's eighths)
// and stores their codes as blocks block0.. of act / meta: the codes out of the kernels that
// hand a GEMV its input (gdn.cu, attention.cu).
__device__ __forceinline__ void quantise_staged_blocks(const float4* stage, int n_blocks, int lane,
                                                       uint32_t* act, ActMeta* meta,
                                                       int64_t block0) {
  const int n = 16 * n_blocks;
  const int u[1] = {lane < n ? lane : lane & 15};
  uint32_t words[1][2];
  float d[1];
  int sum[1];
  quantize_eighths<true, 1>(stage, u, lane, words, d, sum);
  if (lane < n) store_eighth(act + block0 * 32, meta + block0, lane, words[0], d[0], sum[0]);
}

}  // namespace gdn::cuda::mm
