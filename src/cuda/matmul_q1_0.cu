// Q1_0 matrix products: 1-bit sign weights (d = fp16 per 128-weight block, bit ? +d : -d).
//
// Why not dequantise-and-FMA: at batch 1 this format is bound by instructions, not bytes
// (DESIGN.md §6). 4.6 TB/s of Q1_0 (18 bytes per 128 weights) is ~33 T weights/s, and the H200
// issues ~33 T thread-instructions/s in all: one instruction per weight is the whole budget.
// So the arithmetic must do many weights per instruction.
//
// Arithmetic (variant bmma, the default). Activations are quantised per 128-element block to
// int8 codes q with an f32 scale d_x (quant::quantize_activations_q8_128 is the CPU twin), and
// the block's dot with signs s_j = 2 b_j - 1 is, exactly in integers,
//     sum_j s_j q_j = 2 * sum_j b_j q_j - sum_j q_j,
//     sum_j b_j q_j = sum_p w_p * popc(B & Q_p),   w_p = 2^p (p < 7), w_7 = -128,
// where B is the block's 128 weight bits and Q_p the bit plane p of the codes (two's complement).
// All eight popcounts of one block for 16 rows are ONE tensor-core instruction: the b1 mma
// m16n8k128 with .and.popc, A = 16 rows x 128 weight bits (two registers per lane, straight from
// memory, no unpacking), B = 128 x 8 activation bit planes (one register per lane, the same for
// every row tile), D = 16 rows x 8 plane counts. ptxas emits a single BMMA for it on sm_90.
// Each lane then holds 2 rows x 2 planes and finishes its share of the block with
//     I = c0*W0 + c1*W1 - [t == 0] * sum q   (2 IMAD per row, W = 2 w_p folds the factor 2)
//     acc += float(I) * (d_w * d_x)            (HADD2.F32 + FMUL + I2F + FFMA per row)
// plus two activation loads (plane word, {d_x, sum}): ~16 per block, ~19-20 per block with the
// 16-byte weight loads and the loop (SASS of the sm_90a cubin, nvcc 13.0: 1 BMMA, ~5 IMAD,
// 2 HADD2.F32, 2 FMUL, 2 I2F, 2 FFMA, 2.75 LDG per block), so 2048 weights cost the warp ~20
// instructions: ~0.3 thread-instructions per weight, a third of the budget. Lanes t = 0..3 of
// a row are summed once per row tile by two shuffles.
//
// Variant dp4a (no tensor cores; kept in the lab as the fallback): the same weight layout with
// the codes rearranged so that (w >> k) & 0x01010101 selects four weights whose codes sit in one
// int8x4 word: SHF + LOP + DP4A per 4 weights per row, ~58 SASS instructions per 16 x 128
// block, ~0.9 thread-instructions per weight: at the budget, so it cannot reach bandwidth.
//
// Registers (ptxas -v, sm_90a, no spills): bmma-q2 96 (prefetch) / 70 (flat), bmma-q4 152 / 114,
// dp4a-q2 91; the quantise kernel 26.
//
// Weight layout (repacked at upload, 1.125 bits per weight as in the file):
//   row tile = 16 rows (the mma's m), quad = 4 blocks = 512 weights (padded with zero blocks).
//   bits[tile][quad][pair][lane]: uint4 per lane g*4+t = {row g blk 2p word t, row g+8 blk 2p
//     word t, row g blk 2p+1 word t, row g+8 blk 2p+1 word t}: the A fragments of two mmas, one
//     16-byte load, 512 contiguous bytes per warp. Word t of a block holds, at bit i, the weight
//     of element 4i+t (so the activation planes can be built from float4 loads, see below).
//   scales[tile][quad][g]: uint4 = fp16 d of (row g, row g+8) for the quad's 4 blocks; the
//     four lanes of a group read the same 16 bytes (one 128-byte segment per warp).
// Activation layout (the quantise kernel writes it into the workspace, per token):
//   act[block][lane g*4+t]: bit i = bit g of q[4i+t] (bmma: the B fragment of that lane);
//     dp4a: act[block][t*8+k] = the codes q[32b+4k+t] for b = 0..3 as int8x4.
//   meta[block] = {d_x, sum q}.
//
// Work split: a warp owns one row tile x a slice of kQ quads (kQ 16-byte loads of bits + kQ of
// scales in flight); the ceil(quads / kQ) warps of a row tile sit in one CTA and add their sums
// through shared memory in slice order (deterministic, no atomics). CTAs stride over row tiles
// with the next tile's loads issued before the current one is computed.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common/parallel.h"
#include "cuda/matmul.cuh"
#include "quant/quant.h"

namespace gdn::cuda::mm {
namespace {

constexpr int kBlock = 128;      // Q1_0 block = the b1 mma's k
constexpr int kBlockBytes = 18;  // fp16 d + 16 bytes of bits (file layout)
constexpr int kTileRows = 16;    // the mma's m
constexpr int kQuadBlocks = 4;   // blocks per quad (one 16-byte scale load per lane)
// Warps per row tile (slices of kQ quads) a CTA may hold: n_in <= max_slices * kQ * 512, i.e.
// 18432 for kQ = 2 and 24576 for kQ = 4 (Bonsai's longest rows are 17408). The bound sets the
// kernel's register budget: 65536 / (32 * max_slices).
constexpr int max_slices(int kQ) {
  return kQ == 2 ? 18 : 12;
}
constexpr int kBatchTokensQ1 = 16;  // tokens per CTA of the batched kernel (weights reused)

struct alignas(8) ActMeta {
  float d;  // activation scale of the block
  int sum;  // sum of its codes
};

struct Q1Args {
  const uint4* bits;    // [n_tiles][n_quads][2][32]
  const uint4* scales;  // [n_tiles][n_quads][8]
  const uint32_t* act;  // [n_tokens][n_quads * 4][32]
  const ActMeta* meta;  // [n_tokens][n_quads * 4]
  float* y;             // [n_tokens][ldy]
  int64_t ldy;
  int n_out, n_tiles, n_quads, n_tokens;
  int slices;          // warps per row tile
  int chunks;          // chunks of kQ quads per slice
  int rpc;             // row tiles per CTA
  int tokens_per_cta;  // grid.y splits the tokens into groups of this many
};

__device__ __forceinline__ ActMeta load_meta(const ActMeta* p) {
  const int2 v = __ldg(reinterpret_cast<const int2*>(p));
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
  __device__ static int lane_offset(int lane) { return lane; }  // its B fragment word
  __device__ __forceinline__ void block(uint32_t a_lo, uint32_t a_hi, const uint32_t* act,
                                        int neg_sum, int& i_lo, int& i_hi) const {
    const uint32_t b = __ldg(act);
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
  __device__ __forceinline__ void block(uint32_t a_lo, uint32_t a_hi, const uint32_t* act,
                                        int neg_sum, int& i_lo, int& i_hi) const {
    const uint4 q0 = __ldg(reinterpret_cast<const uint4*>(act));
    const uint4 q1 = __ldg(reinterpret_cast<const uint4*>(act) + 1);
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
// Kernels

// One chunk of a row tile for this warp: kQ quads of bits (2 x 16 bytes each) and scales.
template <int kQ>
struct ChunkLoads {
  uint4 bits[kQ][2];
  uint4 scales[kQ];
};

// Per-warp base pointers, so that the loads in the loops have compile-time offsets.
struct WarpView {
  const uint4* bits;    // tile 0, first quad of the slice, + lane
  const uint4* scales;  // tile 0, first quad of the slice, + group
  const uint32_t* act;  // first token of the CTA, first block of the slice, + lane offset
  const ActMeta* meta;  // first token of the CTA, first block of the slice
  int64_t tile_bits, tile_scales;  // strides per row tile
  int64_t token_act, token_meta;   // strides per token
  int quads;                       // quads of the slice (may be < chunks * kQ, even 0)
};

template <int kQ>
__device__ __forceinline__ void load_chunk(const Q1Args& a, const WarpView& v, int tile, int c,
                                           ChunkLoads<kQ>& t) {
  if (tile >= a.n_tiles) return;  // a padding tile of the last group: computed, never stored
  const uint4* bits = v.bits + tile * v.tile_bits + c * kQ * 64;
  const uint4* scales = v.scales + tile * v.tile_scales + c * kQ * 8;
#pragma unroll
  for (int i = 0; i < kQ; ++i) {
    if (c * kQ + i < v.quads) {
      t.bits[i][0] = ld_stream(bits + i * 64);
      t.bits[i][1] = ld_stream(bits + i * 64 + 32);
      t.scales[i] = ld_stream(scales + i * 8);
    }
  }
}

// This warp's chunk c of one row tile against token n: per-lane partial sums of rows g, g+8.
template <class Math, int kQ>
__device__ __forceinline__ float2 dot_chunk(const Math& m, const WarpView& v,
                                            const ChunkLoads<kQ>& t, int c, int n, int lane) {
  const uint32_t* act = v.act + n * v.token_act + c * kQ * kQuadBlocks * 32;
  const ActMeta* meta = v.meta + n * v.token_meta + c * kQ * kQuadBlocks;
  float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int i = 0; i < kQ; ++i) {
    if (c * kQ + i >= v.quads) break;
    const uint32_t words[8] = {t.bits[i][0].x, t.bits[i][0].y, t.bits[i][0].z, t.bits[i][0].w,
                               t.bits[i][1].x, t.bits[i][1].y, t.bits[i][1].z, t.bits[i][1].w};
    const uint32_t halves[4] = {t.scales[i].x, t.scales[i].y, t.scales[i].z, t.scales[i].w};
#pragma unroll
    for (int j = 0; j < kQuadBlocks; ++j) {
      const int blk = i * kQuadBlocks + j;
      const ActMeta am = load_meta(meta + blk);
      const int neg_sum = (lane & 3) == 0 ? -am.sum : 0;
      int i_lo, i_hi;
      m.block(words[2 * j], words[2 * j + 1], act + blk * 32, neg_sum, i_lo, i_hi);
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

// The per-warp state across the chunks of a row tile. One token: the partial sums stay in
// registers until the tile's last chunk. Several: each chunk's sums, lane-reduced, are added
// into this warp's shared-memory slots (only its own lanes touch them: no barrier needed).
template <class Math, int kQ>
struct Q1Warp {
  const Q1Args& a;
  const Math m;
  WarpView v;
  float* red;  // [warps][tokens_per_cta][16]
  int lane, warp, nt, tok0;
  float2 acc;

  __device__ Q1Warp(const Q1Args& a_, float* red_, int lane_, int warp_)
      : a(a_), m(lane_), red(red_), lane(lane_), warp(warp_) {
    const int slice = warp % a.slices;
    const int q_begin = slice * a.chunks * kQ;
    const int n_blocks = a.n_quads * kQuadBlocks;
    tok0 = blockIdx.y * a.tokens_per_cta;
    nt = min(a.tokens_per_cta, a.n_tokens - tok0);
    v.bits = a.bits + int64_t(q_begin) * 64 + lane;
    v.scales = a.scales + int64_t(q_begin) * 8 + (lane >> 2);
    v.act =
        a.act + (int64_t(tok0) * n_blocks + q_begin * kQuadBlocks) * 32 + Math::lane_offset(lane);
    v.meta = a.meta + int64_t(tok0) * n_blocks + q_begin * kQuadBlocks;
    v.tile_bits = int64_t(a.n_quads) * 64;
    v.tile_scales = int64_t(a.n_quads) * 8;
    v.token_act = int64_t(n_blocks) * 32;
    v.token_meta = n_blocks;
    v.quads = max(0, min(a.chunks * kQ, a.n_quads - q_begin));
    acc = make_float2(0.0f, 0.0f);
  }

  __device__ int tile_of(int group) const { return group * a.rpc + warp / a.slices; }

  __device__ void load(int group, int c, ChunkLoads<kQ>& t) const {
    load_chunk<kQ>(a, v, tile_of(group), c, t);
  }

  // Chunk c of the group's tile; after the last chunk, the CTA adds the slices and stores y.
  __device__ void process(int group, int c, const ChunkLoads<kQ>& t) {
    float* slots = red + warp * a.tokens_per_cta * kTileRows + (lane >> 2);
    if (a.tokens_per_cta == 1) {
      const float2 p = dot_chunk<Math, kQ>(m, v, t, c, 0, lane);
      acc.x += p.x;
      acc.y += p.y;
      if (c == a.chunks - 1) {
        const float2 r = sum_quad_lanes(acc);
        if ((lane & 3) == 0) {
          slots[0] = r.x;
          slots[8] = r.y;
        }
        acc = make_float2(0.0f, 0.0f);
      }
    } else {
      for (int n = 0; n < nt; ++n) {
        const float2 r = sum_quad_lanes(dot_chunk<Math, kQ>(m, v, t, c, n, lane));
        if ((lane & 3) == 0) {
          float* s = slots + n * kTileRows;
          s[0] = c == 0 ? r.x : s[0] + r.x;
          s[8] = c == 0 ? r.y : s[8] + r.y;
        }
      }
    }
    if (c == a.chunks - 1) store_tile(group);
  }

  __device__ void store_tile(int group) const {
    __syncthreads();  // every slice's sums are in shared memory before they are added
    for (int i = threadIdx.x; i < a.rpc * nt * kTileRows; i += blockDim.x) {
      const int tl = i / (nt * kTileRows), n = i / kTileRows % nt, r = i % kTileRows;
      const int row = (group * a.rpc + tl) * kTileRows + r;
      if (row >= a.n_out) continue;
      float sum = 0.0f;
      for (int s = 0; s < a.slices; ++s) {  // fixed order: deterministic
        sum += red[((tl * a.slices + s) * a.tokens_per_cta + n) * kTileRows + r];
      }
      a.y[int64_t(tok0 + n) * a.ldy + row] = sum;
    }
    __syncthreads();  // the sums are read before the next row tile overwrites them
  }
};

// grid (CTAs striding over groups of rpc row tiles, token groups), block 32 * slices * rpc,
// dynamic shared memory slices * rpc * tokens_per_cta * 16 floats. Each warp walks the steps
// (group, chunk) of its slice; every warp of a CTA walks the same sequence, so the barriers in
// store_tile line up. kPrefetch: the next step's loads are issued before the current step is
// computed (unrolled by two so both buffers stay in registers without copies).
template <class Math, int kQ, bool kPrefetch>
__global__ void __launch_bounds__(32 * max_slices(kQ)) q1_kernel(Q1Args a) {
  extern __shared__ float red[];
  Q1Warp<Math, kQ> w(a, red, threadIdx.x & 31, threadIdx.x >> 5);
  const int n_groups = (a.n_tiles + a.rpc - 1) / a.rpc;
  int group = blockIdx.x, c = 0;
  const auto advance = [&](int& g, int& k) {
    if (++k == a.chunks) {
      k = 0;
      g += gridDim.x;
    }
  };
  ChunkLoads<kQ> buf0, buf1;
  w.load(group, c, buf0);
  pdl_wait();  // the activations come from the quantise kernel; the weights did not
  if constexpr (kPrefetch) {
    while (group < n_groups) {
      int g1 = group, c1 = c;
      advance(g1, c1);
      if (g1 < n_groups) w.load(g1, c1, buf1);
      w.process(group, c, buf0);
      group = g1;
      c = c1;
      if (group >= n_groups) break;
      advance(g1, c1);
      if (g1 < n_groups) w.load(g1, c1, buf0);
      w.process(group, c, buf1);
      group = g1;
      c = c1;
    }
  } else {
    while (group < n_groups) {
      w.process(group, c, buf0);
      advance(group, c);
      if (group < n_groups) w.load(group, c, buf0);
    }
  }
}

// One warp per (block, token): d = amax / 127, q = roundf(x / d) (IEEE division, as the CPU
// reference), sum q, then the layout of the variant. Blocks past n_in (quad padding) get zeros.
template <bool kPlanes>
__global__ void __launch_bounds__(256)
    q1_quantize_kernel(const float* x, int64_t ldx, int n_in, int n_blocks, uint32_t* act,
                       ActMeta* meta) {
  pdl_launch_dependents();  // the GEMV may start loading weights now
  __shared__ int8_t codes[8][kBlock];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int blk = blockIdx.x * 8 + warp, tok = blockIdx.y;
  if (blk >= n_blocks) return;
  const int64_t tb = int64_t(tok) * n_blocks + blk;
  if (blk * kBlock >= n_in) {
    act[tb * 32 + lane] = 0;
    if (lane == 0) meta[tb] = ActMeta{0.0f, 0};
    return;
  }
  const float* xb = x + int64_t(tok) * ldx + int64_t(blk) * kBlock + 4 * lane;
  float v[4];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[j] = xb[j];
    amax = fmaxf(amax, fabsf(v[j]));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, o));
  const float d = amax / 127.0f;
  int q[4];
  int sum = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    q[j] = d == 0.0f ? 0 : static_cast<int>(roundf(v[j] / d));
    sum += q[j];
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kFullMask, sum, o);
  if (lane == 0) meta[tb] = ActMeta{d, sum};

  uint32_t word = 0;
  if constexpr (kPlanes) {
    // Chunk t = elements 4i+t (lane i, component t); lane g*4+t keeps plane g of chunk t.
#pragma unroll
    for (int t = 0; t < 4; ++t) {
#pragma unroll
      for (int p = 0; p < 8; ++p) {
        const uint32_t plane = __ballot_sync(kFullMask, (q[t] >> p) & 1);
        if (lane == p * 4 + t) word = plane;
      }
    }
  } else {
    // Lane t*8+k packs the codes of elements 32b+4k+t, b = 0..3.
#pragma unroll
    for (int j = 0; j < 4; ++j) codes[warp][4 * lane + j] = static_cast<int8_t>(q[j]);
    __syncwarp();  // the warp's codes are in shared memory before lanes read each other's
    const int t = lane >> 3, k = lane & 7;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      word |= static_cast<uint32_t>(static_cast<uint8_t>(codes[warp][32 * b + 4 * k + t]))
              << (8 * b);
    }
  }
  act[tb * 32 + lane] = word;
}

// ---------------------------------------------------------------------------------------------
// Launchers

struct Geometry {
  int64_t n_quads, n_blocks_padded;
};

Geometry geometry(int64_t n_in) {
  const int64_t quads = ceil_div(n_in / kBlock, kQuadBlocks);
  return {quads, quads * kQuadBlocks};
}

bool uses_planes(Q1Variant v) {
  return v != Q1Variant::kDp4a2;
}

// How a product is cut: slices (warps per row tile) of `chunks` steps of kQ quads, rpc row tiles
// per CTA, grid.x CTAs striding over the row-tile groups.
struct Plan {
  int slices = 0, chunks = 0, rpc = 0, threads = 0;
  unsigned grid = 0;
  size_t smem = 0;
};

// Picks the cut with the fewest sequential steps on the busiest warp (waves of CTAs times
// chunks per slice), preferring fewer waves on ties: one wave of equal CTAs keeps every SM
// streaming to the end, where a partial second wave leaves most of the GPU idle.
template <class Kernel>
Plan plan_q1(Kernel* kernel, int kQ, int n_tiles, int n_quads, int tokens_per_cta) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int, int>, Plan> cache;
  const auto key =
      std::make_tuple(reinterpret_cast<const void*>(kernel), n_tiles, n_quads, tokens_per_cta);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  Plan best;
  int64_t best_steps = 0, best_waves = 0;
  const int max_chunks = static_cast<int>(ceil_div(n_quads, kQ));
  for (int chunks = 1; chunks <= max_chunks; ++chunks) {
    const int slices = static_cast<int>(ceil_div(n_quads, int64_t(chunks) * kQ));
    if (slices > max_slices(kQ)) continue;
    for (int rpc : {1, std::max(1, 8 / slices)}) {
      Plan p;
      p.slices = slices;
      p.chunks = chunks;
      p.rpc = rpc;
      p.threads = 32 * slices * rpc;
      p.smem = sizeof(float) * slices * rpc * tokens_per_cta * kTileRows;
      int per_sm = 0;
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, p.threads, p.smem));
      if (per_sm < 1) continue;
      const int64_t groups = ceil_div(n_tiles, rpc), ctas = int64_t(per_sm) * sm_count();
      const int64_t waves = ceil_div(groups, ctas), steps = waves * chunks;
      p.grid = static_cast<unsigned>(std::min(groups, ctas));
      if (best.threads == 0 || steps < best_steps || (steps == best_steps && waves < best_waves)) {
        best = p;
        best_steps = steps;
        best_waves = waves;
      }
    }
  }
  if (best.threads == 0) fail("cuda matmul q1_0: no launch shape fits n_in = {}", n_quads * 512);
  cache.emplace(key, best);
  return best;
}

template <class Math, int kQ, bool kPrefetch>
struct Q1Launch {
  static constexpr auto kernel = &q1_kernel<Math, kQ, kPrefetch>;

  static Plan plan(const GpuMatrix& w, int64_t n_tokens) {
    return plan_q1(kernel, kQ, static_cast<int>(w.n_row_tiles),
                   static_cast<int>(geometry(w.n_in).n_quads), tokens_per_cta(n_tokens));
  }
  static int tokens_per_cta(int64_t n_tokens) {
    return static_cast<int>(std::min<int64_t>(n_tokens, kBatchTokensQ1));
  }

  static void run(const GpuMatrix& w, const void* act, float* y, int64_t ldy, int64_t n_tokens,
                  bool pdl, cudaStream_t s) {
    const Geometry geo = geometry(w.n_in);
    Q1Args a;
    a.bits = w.codes.as<const uint4>();
    a.scales = w.scales.as<const uint4>();
    a.act = static_cast<const uint32_t*>(act);
    a.meta = reinterpret_cast<const ActMeta*>(a.act + n_tokens * geo.n_blocks_padded * 32);
    a.y = y;
    a.ldy = ldy;
    a.n_out = static_cast<int>(w.n_out);
    a.n_tiles = static_cast<int>(w.n_row_tiles);
    a.n_quads = static_cast<int>(geo.n_quads);
    a.n_tokens = static_cast<int>(n_tokens);
    a.tokens_per_cta = tokens_per_cta(n_tokens);
    const Plan p = plan(w, n_tokens);
    a.slices = p.slices;
    a.chunks = p.chunks;
    a.rpc = p.rpc;
    const dim3 grid(p.grid, static_cast<unsigned>(ceil_div(n_tokens, a.tokens_per_cta)));
    launch(kernel, grid, dim3(p.threads), p.smem, pdl, s, a);
  }

  static std::string describe(const GpuMatrix& w, int64_t n_tokens) {
    const Plan p = plan(w, n_tokens);
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    return fmt::format(
        "{} warps/tile x {} steps of {} quads, {} tiles/CTA, {} CTAs x {} threads, "
        "{} regs",
        p.slices, p.chunks, kQ, p.rpc, p.grid, p.threads, attr.numRegs);
  }
};

// Calls fn.template operator()<Launch>() with the Q1Launch of variant v.
template <class Fn>
decltype(auto) with_variant(Q1Variant v, Fn&& fn) {
  switch (v) {
    case Q1Variant::kBmma2:
      return fn(Q1Launch<BmmaMath, 2, true>{});
    case Q1Variant::kBmma2Flat:
      return fn(Q1Launch<BmmaMath, 2, false>{});
    case Q1Variant::kBmma4:
      return fn(Q1Launch<BmmaMath, 4, true>{});
    case Q1Variant::kBmma4Flat:
      return fn(Q1Launch<BmmaMath, 4, false>{});
    case Q1Variant::kDp4a2:
      break;
  }
  return fn(Q1Launch<Dp4aMath, 2, true>{});
}

// Bits of word t of one stored block: bit i = weight 4i+t.
uint32_t gather_word(const uint8_t* qs, int t) {
  uint32_t w = 0;
  for (int k = 0; k < 16; ++k) {  // byte k holds elements 8k..8k+7 = (i = 2k, 2k+1) for t
    w |= static_cast<uint32_t>((qs[k] >> t) & 1) << (2 * k);
    w |= static_cast<uint32_t>((qs[k] >> (t + 4)) & 1) << (2 * k + 1);
  }
  return w;
}

}  // namespace

const char* q1_variant_name(Q1Variant v) {
  switch (v) {
    case Q1Variant::kBmma2:
      return "bmma-q2";
    case Q1Variant::kBmma2Flat:
      return "bmma-q2-flat";
    case Q1Variant::kBmma4:
      return "bmma-q4";
    case Q1Variant::kBmma4Flat:
      return "bmma-q4-flat";
    case Q1Variant::kDp4a2:
      return "dp4a-q2";
  }
  return "?";
}

GpuMatrix upload_q1_0(const model::Matrix& m, cudaStream_t s) {
  const Geometry geo = geometry(m.n_in);
  const int64_t n_blocks = m.n_in / kBlock;
  const int64_t tiles = ceil_div(m.n_out, kTileRows);
  std::vector<uint32_t> bits(static_cast<size_t>(tiles * geo.n_quads * 2 * 32 * 4));
  std::vector<uint16_t> scales(static_cast<size_t>(tiles * geo.n_quads * 8 * 8));
  const auto block_ptr = [&](int64_t row, int64_t b) -> const uint8_t* {
    if (row >= m.n_out || b >= n_blocks) return nullptr;
    return m.data + static_cast<size_t>(row) * m.row_bytes + static_cast<size_t>(b) * kBlockBytes;
  };
  ThreadPool pool;
  pool.parallel_for(tiles, [&](int64_t begin, int64_t end) {
    for (int64_t tile = begin; tile < end; ++tile) {
      for (int64_t quad = 0; quad < geo.n_quads; ++quad) {
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane >> 2, t = lane & 3;
          for (int pair = 0; pair < 2; ++pair) {
            uint32_t* out = &bits[static_cast<size_t>(
                (((tile * geo.n_quads + quad) * 2 + pair) * 32 + lane) * 4)];
            for (int v = 0; v < 4; ++v) {  // {g b0, g+8 b0, g b1, g+8 b1}
              const uint8_t* b = block_ptr(tile * kTileRows + g + 8 * (v & 1),
                                           quad * kQuadBlocks + 2 * pair + (v >> 1));
              out[v] = b ? gather_word(b + 2, t) : 0;
            }
          }
        }
        for (int g = 0; g < 8; ++g) {
          uint16_t* out = &scales[static_cast<size_t>(((tile * geo.n_quads + quad) * 8 + g) * 8)];
          for (int v = 0; v < 8; ++v) {  // {g b0, g+8 b0, g b1, ...}
            const uint8_t* b =
                block_ptr(tile * kTileRows + g + 8 * (v & 1), quad * kQuadBlocks + v / 2);
            uint16_t d = 0;
            if (b) std::memcpy(&d, b, sizeof d);
            out[v] = d;
          }
        }
      }
    }
  });
  GpuMatrix w;
  w.name = m.name;
  w.type = m.type;
  w.n_in = m.n_in;
  w.n_out = m.n_out;
  w.n_row_tiles = tiles;
  w.n_col_tiles = geo.n_quads;
  w.codes = DeviceBuffer(bits.size() * sizeof(uint32_t));
  w.scales = DeviceBuffer(scales.size() * sizeof(uint16_t));
  CUDA_CHECK(
      cudaMemcpyAsync(w.codes.get(), bits.data(), w.codes.bytes(), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(
      cudaMemcpyAsync(w.scales.get(), scales.data(), w.scales.bytes(), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaStreamSynchronize(s));  // the host staging vectors die here
  return w;
}

size_t q1_0_workspace_bytes(int64_t n_in, int64_t n_tokens) {
  const Geometry geo = geometry(n_in);
  return static_cast<size_t>(n_tokens * geo.n_blocks_padded) *
         (32 * sizeof(uint32_t) + sizeof(ActMeta));
}

void q1_0_quantize(const GpuMatrix& w, const float* x, int64_t ldx, int64_t n_tokens, void* act,
                   Q1Variant v, cudaStream_t s) {
  const Geometry geo = geometry(w.n_in);
  auto* words = static_cast<uint32_t*>(act);
  auto* meta = reinterpret_cast<ActMeta*>(words + n_tokens * geo.n_blocks_padded * 32);
  const dim3 grid(static_cast<unsigned>(ceil_div(geo.n_blocks_padded, 8)),
                  static_cast<unsigned>(n_tokens));
  const int n_in = static_cast<int>(w.n_in), n_blocks = static_cast<int>(geo.n_blocks_padded);
  if (uses_planes(v)) {
    q1_quantize_kernel<true><<<grid, 256, 0, s>>>(x, ldx, n_in, n_blocks, words, meta);
  } else {
    q1_quantize_kernel<false><<<grid, 256, 0, s>>>(x, ldx, n_in, n_blocks, words, meta);
  }
  CUDA_CHECK_LAUNCH();
}

void q1_0_product(const GpuMatrix& w, const void* act, float* y, int64_t ldy, int64_t n_tokens,
                  const Q1Options& o, cudaStream_t s) {
  if (!aligned16(act))
    fail("cuda matmul q1_0 '{}': activation scratch not 16-byte aligned", w.name);
  with_variant(o.variant, [&](auto l) { l.run(w, act, y, ldy, n_tokens, o.pdl, s); });
  CUDA_CHECK_LAUNCH();
}

std::string q1_0_describe(const GpuMatrix& w, int64_t n_tokens, const Q1Options& o) {
  return with_variant(o.variant, [&](auto l) { return l.describe(w, n_tokens); });
}

void matmul_q1_0(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
                 int64_t n_tokens, MatmulWorkspace& ws, const Q1Options& o, cudaStream_t s) {
  check_matmul_args(w, x, ldx, y, ldy, n_tokens);
  void* act = ws.get(q1_0_workspace_bytes(w.n_in, n_tokens), s);
  q1_0_quantize(w, x, ldx, n_tokens, act, o.variant, s);
  q1_0_product(w, act, y, ldy, n_tokens, o, s);
}

}  // namespace gdn::cuda::mm
