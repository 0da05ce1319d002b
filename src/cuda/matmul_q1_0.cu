// Q1_0 matrix products: 1-bit sign weights (d = fp16 per 128-weight block, bit ? +d : -d).
//
// Why not dequantise-and-FMA: at batch 1 this format is bound by instructions, not bytes
// (DESIGN.md §6). 4.6 TB/s of Q1_0 (18 bytes per 128 weights) is ~33 T weights/s, and the H200
// issues ~33 T thread-instructions/s in all: one instruction per weight is the whole budget.
// So the arithmetic must do many weights per instruction.
//
// Arithmetic (variant bmma, the default; its device code, with the cut of a row into slices, is in
// q1_dot.cuh). Activations are quantised per 128-element block to int8 codes q with an f32 scale
// d_x (quant::quantize_activations_q8_128 is the CPU twin), and the block's dot with signs
// s_j = 2 b_j - 1 is, exactly in integers,
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
// Variant imma (prefill: batches where imma_wins): the dp4a codes against the weights' bits on
// int8 tensor cores, 16 rows x 8 tokens x 32 elements an mma; its section below says why.
//
// Registers (ptxas -v, sm_90a, no spills): bmma-q2 96 (prefetch) / 70 (flat), bmma-q4 152 / 114,
// dp4a-q2 91, imma 120; the quantise kernel 26 (measured before the one-launch kernel; see
// q1_gemv_kernel).
//
// Weight layout (repacked at upload, 1.125 bits per weight as in the file):
//   row tile = 16 rows (the mma's m), quad = 4 blocks = 512 weights (padded with zero blocks).
//   bits[tile][quad][pair][lane]: uint4 per lane g*4+t = {row g blk 2p word t, row g+8 blk 2p
//     word t, row g blk 2p+1 word t, row g+8 blk 2p+1 word t}: the A fragments of two mmas, one
//     16-byte load, 512 contiguous bytes per warp. Word t of a block is its file bytes 4t..4t+3:
//     bit i = the weight of element 32t+i (the mma's k = element; no permutation).
//   scales[tile][quad][g]: uint4 = fp16 d of (row g, row g+8) for the quad's 4 blocks; the
//     four lanes of a group read the same 16 bytes (one 128-byte segment per warp).
// Activation layout (per token; the workspace of the two-launch path, or shared memory):
//   act[block][t*8 + g]: bit i = bit g of q[32t+i] (bmma: the B fragment of lane g*4+t);
//     dp4a: act[block][t*8 + k] = the codes q[32t+8b+k] for b = 0..3 as int8x4.
//   meta[block] = {d_x, sum q}.
//
// Quantisation (act_quantize.cuh's quantize_eighths, the one home of the formula, run by the
// quantise kernel of the two-launch path, by the one-launch GEMV and by the kernels that hand
// it codes): a thread per eighth of a block (8 consecutive elements; the GEMV's threads take
// two, interleaved), the sixteen eighths of a block on sixteen aligned lanes. amax over the
// block (four shuffles), d = amax / 127 (IEEE division), q = roundf(v / d) (0 when d = 0), sum
// q. The codes come from v * (1/d) with a tie guard instead of IEEE divisions: when the product
// is more than 2^-14 from a half-integer it rounds like the exact quotient (proof at
// quantize_codes_fast), otherwise the thread redoes its eight with the division. Its 8 codes become
// 8 plane bytes by one 8x8 bit transpose, and the four lanes of a quarter swap bytes (two
// shuffle steps) into the plane words. A thread per quarter (32 elements, ~500 instructions in
// one dependent chain) kept 5 of 15 warps busy: its phase of the 5120->10240 GEMV took ~2.3 us
// on the H200, the eighths take ~1.3 us. The floats come from shared memory in a swizzled
// layout (stage_pos) so that the coalesced staging stores are free of bank conflicts.
//
// Work split: a warp owns one row tile x a slice of kQ quads (kQ 16-byte loads of bits + kQ of
// scales in flight); the `slices` warps of a row tile add their sums through shared memory in
// slice order (deterministic, no atomics). How n_in is cut (q1_cut: kQ, slices, chunks of kQ
// quads per slice) depends on n_in and the variant only, never on n_out or the launch: at most
// cut_slices warps per row tile, in as few chunks as that allows (kQ = 2: n_in 5120 -> 5 warps
// of one chunk, 6144 -> 6 of one, 17408 -> 6 of three; tests/test_launch_rules.cu). Only how
// many row tiles a CTA holds and the grid follow n_out.
//
// The two-launch product kernel (q1_kernel) holds rpc row tiles per CTA and strides over row
// tile groups with the next step's loads issued before the current one is computed. The
// one-launch GEMV (q1_gemv_kernel) is described at the kernel.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common/parallel.h"
#include "cuda/act_quantize.cuh"
#include "cuda/async_copy.cuh"
#include "cuda/float_formats.cuh"
#include "cuda/matmul.cuh"
#include "cuda/q1_dot.cuh"
#include "cuda/q1_imma.h"
#include "quant/quant.h"

namespace gdn::cuda::mm {
namespace {

constexpr int kBlockBytes = 18;  // fp16 d + 16 bytes of bits (file layout)
// Warps a one-launch GEMV CTA may hold (teams x slices; its register budget, 65536 / (32 *
// warps): 102 for kQ = 2, whose kernel uses 96). More than max_slices so that four teams of the
// 5 warps of a 5120-long row fit (gemv_teams).
constexpr int gemv_max_warps(int kQ) {
  return kQ == 2 ? 20 : 12;
}
constexpr int kBatchTokensQ1 = 16;   // tokens per CTA of the batched kernel (weights reused)
constexpr int kQuantizeBlocks = 16;  // blocks per CTA of the quantise kernel (16 threads each)

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

// ---------------------------------------------------------------------------------------------
// The two-launch product kernel

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
  load_quads<kQ>(v.bits + tile * v.tile_bits + c * kQ * 64,
                 v.scales + tile * v.tile_scales + c * kQ * 8, v.quads - c * kQ, t);
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

  __device__ __forceinline__ float2 dot(int c, int n, const ChunkLoads<kQ>& t) const {
    return dot_chunk<Math, kQ, false>(m, v.act + n * v.token_act + c * kQ * kQuadBlocks * 32,
                                      v.meta + n * v.token_meta + c * kQ * kQuadBlocks, t,
                                      v.quads - c * kQ, lane);
  }

  // Chunk c of the group's tile; after the last chunk, the CTA adds the slices and stores y.
  __device__ void process(int group, int c, const ChunkLoads<kQ>& t) {
    float* slots = red + warp * a.tokens_per_cta * kTileRows + (lane >> 2);
    if (a.tokens_per_cta == 1) {
      const float2 p = dot(c, 0, t);
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
        const float2 r = sum_quad_lanes(dot(c, n, t));
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
      a.y[int64_t(tok0 + n) * a.ldy + row] =
          sum_slices(red + (tl * a.slices * a.tokens_per_cta + n) * kTileRows + r, a.slices,
                     a.tokens_per_cta * kTileRows);
    }
    __syncthreads();  // the sums are read before the next row tile overwrites them
  }
};

// grid (CTAs striding over groups of rpc row tiles, token groups), block 32 * slices * rpc,
// dynamic shared memory slices * rpc * tokens_per_cta * 16 floats. Each warp walks the steps
// (group, chunk) of its slice; every warp of a CTA walks the same sequence, so the barriers in
// store_tile line up. kPrefetch: the next step's loads are issued before the current step is
// computed (unrolled by two so both buffers stay in registers without copies). Unlike the
// one-launch GEMV's loop, this one loses without the unrolling: with the buffer moved instead,
// pp512 1447 -> 1252 (H200, 2026-12-02, bench/RESULTS.md); its steps are 16 tokens' dots.
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
  // The next kernel may start now: its CTAs take the room this grid leaves and issue their own
  // weight loads. Measured (H200, 2026-12-04, bench/gemv_lab): the product alone back to back
  // 5120->10240 flat 4.46 -> 3.47 µs (the read ceiling: 3.43), 6144->5120 3.83 -> 2.85, and
  // with the quantise kernel between 5120->6144 4.26 -> 3.88, 6144->5120 4.33 -> 3.85.
  pdl_launch_dependents();
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

// ---------------------------------------------------------------------------------------------
// The int8 tensor-core product (Q1Variant::kImma; many tokens: prefill)
//
// Why: the b1 kernel above finishes every block with a per-token epilogue of ~17 warp
// instructions per 2048 multiply-adds (two plane weights, I2F, scales), so at 512 tokens its
// GEMMs are bound by that epilogue, not by the tensor cores. Here one `mma.sync m16n8k32 .s8`
// takes 16 rows x 8 tokens x 32 elements at once (q1_imma.h derives the operands): the weights'
// bits as 0/1 bytes (one shift and mask of a word the lane holds, reused for 4 x 8 tokens) and
// the dp4a code words exactly as the quantise kernel stores them. Each block's integer dot
// comes out of four mmas exact and is added as float(I) * (d_w * d_x), in block order, as the
// GEMV does. Per 16 rows x 8 tokens x 128 elements a warp issues ~38 instructions (4 MMA, 2
// LDS.128 of codes, 2 LDS.64 of scales, 4 IADD joining two mma chains, 4 x IMAD + I2F + FMUL +
// FFMA, and a quarter of the 32 SHF/LOP that make a block's A registers), where the b1 kernel
// issues 8 x ~17.5. Measured (H200, 2026-12-05, bench/RESULTS.md): 5120->17408 x 512 tokens
// 1290 -> 267 µs (171 T MAC/s, 27% of the s8 mma rate), then 250 µs with two accumulator chains
// (below); pp512 1434 -> 3703 tok/s. Not bound by I2F: converting by a 1.5 * 2^23 bias instead
// (IMAD + FADD) measured 2-4% slower.
//
// A CTA is kImmaWarps row tiles (a warp each) x kImmaTokens tokens (4 groups of 8) and walks
// n_in a quad (4 blocks) at a time. The tokens' codes and scales of a quad are staged in
// shared memory by cp.async, two stages (the next quad's copies fly while this one is
// computed); each warp streams its own weights into registers one quad ahead.

constexpr int kImmaWarps = 8;
constexpr int kImmaTokens = 32;
constexpr int kImmaGroups = kImmaTokens / 8;  // the mma's n = 8 tokens
// Whether a batch takes the int8 product (q1_default_options). Measured (H200, 2026-12-05,
// bench/gemv_lab's batch table, product kernel alone, b1 / int8 µs): at 512 tokens int8 is
// 3.7-4.8x faster on every Bonsai shape (5120->17408 1290 / 267 µs, 171 T MAC/s). Few tokens
// on narrow outputs leave it few CTAs (5120 rows: 40 a token group, on 132 SMs): 17408->5120
// 22.0 / 32.8 at 8 tokens, 40.9 / 46.1 at 16, 79.2 / 72.5 at 32; 6144->5120 8.2 / 12.3,
// 14.5 / 17.0, 28.2 / 26.3. Wide outputs win from 8 tokens: 5120->17408 25.6 / 14.8,
// 5120->10240 14.7 / 13.8.
constexpr bool imma_wins(int64_t n_out, int64_t n_tokens) {
  return n_tokens >= 32 || (n_tokens >= 8 && n_out >= 10000);
}
constexpr int kImmaChunks = kQuadBlocks * 32 / 4;  // 16-byte chunks of a token's quad of codes

// One stage: a quad of codes and scales of the CTA's tokens. Token n's chunk c sits at
// n * kImmaChunks + (c ^ (n & 1)): the eight lanes of a quarter warp (tokens 2m and 2m+1,
// chunks 2t + h) then read eight distinct 16-byte bank groups.
struct ImmaStage {
  uint4 codes[kImmaTokens * kImmaChunks];
  ActMeta meta[kImmaTokens * kQuadBlocks];
};

static_assert(kImmaTokens * kImmaChunks % (kImmaWarps * 32) == 0, "every thread stages alike");
static_assert(kImmaTokens * kQuadBlocks * sizeof(ActMeta) / 16 <= kImmaWarps * 32,
              "one meta chunk a thread at most");

__device__ __forceinline__ int imma_chunk_pos(int n, int c) {
  return n * kImmaChunks + (c ^ (n & 1));
}

// The CTA's copies of quad q into st (zeros for tokens past n_tokens); one commit group.
__device__ __forceinline__ void imma_stage(const Q1Args& a, int tok0, int q, ImmaStage& st) {
  const int n_blocks = a.n_quads * kQuadBlocks;
  constexpr int kThreads = kImmaWarps * 32;
#pragma unroll
  for (int k = 0; k < kImmaTokens * kImmaChunks / kThreads; ++k) {
    const int i = threadIdx.x + k * kThreads, n = i / kImmaChunks, c = i % kImmaChunks;
    const bool valid = tok0 + n < a.n_tokens;
    const uint32_t* src =
        valid ? a.act + (int64_t(tok0 + n) * n_blocks + q * kQuadBlocks) * 32 + c * 4 : a.act;
    cp_async_or_zero(&st.codes[imma_chunk_pos(n, c)], src, valid);
  }
  constexpr int kMetaChunks = kImmaTokens * kQuadBlocks * int(sizeof(ActMeta)) / 16;
  if (threadIdx.x < kMetaChunks) {
    const int n = threadIdx.x / 2, half = threadIdx.x % 2;
    const bool valid = tok0 + n < a.n_tokens;
    const ActMeta* src =
        valid ? a.meta + int64_t(tok0 + n) * n_blocks + q * kQuadBlocks + 2 * half : a.meta;
    cp_async_or_zero(&st.meta[n * kQuadBlocks + 2 * half], src, valid);
  }
  cp_async_commit();
}

// A warp's weights of one quad: the GEMV layout's two bit loads and one scale load a lane.
struct ImmaWeights {
  uint4 bits[2];
  uint4 scales;
};

// Lane (g, t)'s eight code words of block b for token group grp (token grp * 8 + g): what it
// passes as B, word imma_b_word(t, j, r) - t * 8 of mma j.
__device__ __forceinline__ void imma_codes(const ImmaStage& st, int grp, int b, int lane,
                                           uint32_t (&words)[8]) {
  const int n = grp * 8 + (lane >> 2), t = lane & 3;
  const uint4 c0 = st.codes[imma_chunk_pos(n, b * 8 + 2 * t)];
  const uint4 c1 = st.codes[imma_chunk_pos(n, b * 8 + 2 * t + 1)];
  const uint32_t w[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
#pragma unroll
  for (int k = 0; k < 8; ++k) words[k] = w[k];
}

// acc += mma j of a block: A from the rows' bit registers, B from the token group's words.
__device__ __forceinline__ void imma_mma(int (&c)[4], const uint32_t (&a_g)[8],
                                         const uint32_t (&a_g8)[8], const uint32_t (&words)[8],
                                         int j, int t) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a_g[2 * j]), "r"(a_g8[2 * j]), "r"(a_g[2 * j + 1]), "r"(a_g8[2 * j + 1]),
        "r"(words[imma_b_word(t, j, 0) - t * 8]), "r"(words[imma_b_word(t, j, 1) - t * 8]));
}

// Block b's integer dots d (D registers) of token group grp scaled into o: float(I) * (d_w *
// d_x) for each of the lane's rows g / g+8 and tokens 2t / 2t+1.
__device__ __forceinline__ void imma_scale_add(const ImmaStage& st, int grp, int b, int lane,
                                               float2 dw, const int (&d)[4], float (&o)[4]) {
  const ActMeta m0 = st.meta[(grp * 8 + imma_d_token(lane, 0)) * kQuadBlocks + b];
  const ActMeta m1 = st.meta[(grp * 8 + imma_d_token(lane, 1)) * kQuadBlocks + b];
  o[0] = fmaf(static_cast<float>(imma_signed_dot(d[0], m0.sum)), dw.x * m0.d, o[0]);
  o[1] = fmaf(static_cast<float>(imma_signed_dot(d[1], m1.sum)), dw.x * m1.d, o[1]);
  o[2] = fmaf(static_cast<float>(imma_signed_dot(d[2], m0.sum)), dw.y * m0.d, o[2]);
  o[3] = fmaf(static_cast<float>(imma_signed_dot(d[3], m1.sum)), dw.y * m1.d, o[3]);
}

// The quad's four blocks against the CTA's 32 tokens, added into acc[group][c] (c: the D
// registers' rows g / g+8 x tokens 2t / 2t+1, as q1_imma.h lays them out).
// groups: how many groups of 8 tokens hold any of the batch's tokens (the rest are skipped).
// kPairs (Q1Variant::kImmaPairs): two token groups at once, one mma chain each, instead of one
// group in two chains joined by 4 IADD: the same integers, so the same bits. Predicted ~8% fewer
// instructions (the joins); measured (H100, 2026-12-05, the lab's batch table) 0.4-1.3% faster at
// 512 tokens and slower at 8 (a pair is 16 tokens), so not the default.
template <bool kPairs>
__device__ __forceinline__ void imma_quad(const ImmaStage& st, const ImmaWeights& w, int lane,
                                          int groups, float (&acc)[kImmaGroups][4]) {
  const int t = lane & 3;
  const uint32_t halves[4] = {w.scales.x, w.scales.y, w.scales.z, w.scales.w};
#pragma unroll
  for (int b = 0; b < kQuadBlocks; ++b) {
    const uint4& pair = w.bits[b / 2];
    const uint32_t row_g = b % 2 ? pair.z : pair.x, row_g8 = b % 2 ? pair.w : pair.y;
    uint32_t a_g[8], a_g8[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      a_g[k] = imma_bits(row_g, k);
      a_g8[k] = imma_bits(row_g8, k);
    }
    __half2 h;
    std::memcpy(&h, &halves[b], sizeof h);
    const float2 dw = __half22float2(h);  // rows g, g+8
    if constexpr (kPairs) {
#pragma unroll
      for (int grp = 0; grp < kImmaGroups; grp += 2) {
        if (grp >= groups) break;  // a pair's second group past the batch: zero codes, not stored
        uint32_t w0[8], w1[8];
        imma_codes(st, grp, b, lane, w0);
        imma_codes(st, grp + 1, b, lane, w1);
        int d0[4] = {}, d1[4] = {};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          imma_mma(d0, a_g, a_g8, w0, j, t);
          imma_mma(d1, a_g, a_g8, w1, j, t);
        }
        imma_scale_add(st, grp, b, lane, dw, d0, acc[grp]);
        imma_scale_add(st, grp + 1, b, lane, dw, d1, acc[grp + 1]);
      }
    } else {
#pragma unroll
      for (int grp = 0; grp < kImmaGroups; ++grp) {
        if (grp >= groups) break;
        uint32_t words[8];
        imma_codes(st, grp, b, lane, words);
        // Two accumulator chains (j even / odd), added once: the warps wait on the mma's
        // ~25-clock dependent latency (ncu at 5120->17408 x 512 with one chain: 7.3 cycles
        // between a warp's issues, 2.8 of them fixed-latency dependency; 3.9 warps a scheduler,
        // 0.92 eligible). Two chains: 264.8 -> 250.2 µs, 17408->5120 x 512 273.4 -> 251.8,
        // pp512 3562 -> 3703 (H200, 2026-12-05). Integer sums: the same bits.
        int dc[2][4] = {};
#pragma unroll
        for (int j = 0; j < 4; ++j) imma_mma(dc[j & 1], a_g, a_g8, words, j, t);
        const int d[4] = {dc[0][0] + dc[1][0], dc[0][1] + dc[1][1], dc[0][2] + dc[1][2],
                          dc[0][3] + dc[1][3]};
        imma_scale_add(st, grp, b, lane, dw, d, acc[grp]);
      }
    }
  }
}

// grid (ceil(n_tiles / kImmaWarps), ceil(n_tokens / kImmaTokens)), block kImmaWarps * 32. Uses
// Q1Args' pointers and sizes only (no cut: a warp owns its row tile's whole n_in).
template <bool kPairs>
__global__ void __launch_bounds__(kImmaWarps * 32, 2) q1_imma_kernel(Q1Args a) {
  __shared__ ImmaStage stage[2];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tile = blockIdx.x * kImmaWarps + warp, tok0 = blockIdx.y * kImmaTokens;
  const bool active = tile < a.n_tiles;  // the last CTA's spare warps only stage and wait
  const int groups = min(kImmaGroups, (a.n_tokens - tok0 + 7) / 8);
  const uint4* bits = a.bits + int64_t(active ? tile : 0) * a.n_quads * 64 + lane;
  const uint4* scales = a.scales + int64_t(active ? tile : 0) * a.n_quads * 8 + (lane >> 2);
  const auto load = [&](int q, ImmaWeights& w) {
    w.bits[0] = ld_stream(bits + q * 64);
    w.bits[1] = ld_stream(bits + q * 64 + 32);
    w.scales = ld_stream(scales + q * 8);
  };
  ImmaWeights cur, next{};
  load(0, cur);
  pdl_launch_dependents();
  pdl_wait();  // the codes come from the quantise kernel; the weights did not
  imma_stage(a, tok0, 0, stage[0]);
  float acc[kImmaGroups][4] = {};
  for (int q = 0; q < a.n_quads; ++q) {
    if (q + 1 < a.n_quads) {
      imma_stage(a, tok0, q + 1, stage[(q + 1) & 1]);
      load(q + 1, next);
    } else {
      cp_async_commit();  // an empty group keeps the wait count below uniform
    }
    cp_async_wait<1>();
    __syncthreads();  // every thread's copies of quad q have landed
    if (active) imma_quad<kPairs>(stage[q & 1], cur, lane, groups, acc);
    __syncthreads();  // quad q is read before its stage takes quad q + 2
    cur = next;
  }
  if (!active) return;
#pragma unroll
  for (int grp = 0; grp < kImmaGroups; ++grp) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int row = tile * kTileRows + imma_d_row(lane, c);
      const int tok = tok0 + grp * 8 + imma_d_token(lane, c);
      if (row < a.n_out && tok < a.n_tokens) a.y[int64_t(tok) * a.ldy + row] = acc[grp][c];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Activation quantisation (the formula: act_quantize.cuh)

// The two-launch path's quantise kernel. grid (ceil(n_blocks / 16), tokens), 256 threads: the
// CTA stages 16 blocks of one token in shared memory (coalesced 16-byte loads when `vec`: the
// row is 16-byte aligned), then each thread quantises one eighth. Blocks past n_in (quad
// padding) are staged as zeros: d = 0, codes 0, sum 0.
template <bool kPlanes>
__global__ void __launch_bounds__(kQuantizeBlocks * 16)
    q1_quantize_kernel(const float* x, int64_t ldx, int n_in, int n_blocks, int vec, uint32_t* act,
                       ActMeta* meta) {
  pdl_enter();  // the GEMV may start loading weights now; x comes from earlier kernels
  __shared__ float4 stage[kQuantizeBlocks * 32];
  const int tok = blockIdx.y, b0 = blockIdx.x * kQuantizeBlocks;
  const int nb = min(kQuantizeBlocks, n_blocks - b0);
  const float* xr = x + int64_t(tok) * ldx + int64_t(b0) * kBlock;
  const int n_valid = n_in - b0 * kBlock;  // a multiple of 128 (may be <= 0)
  // Every load before any store (as stage_pass, matmul.cuh, says why).
  constexpr int kThreads = kQuantizeBlocks * 16, kPerThread = kQuantizeBlocks * 32 / kThreads;
  float4 v[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int i = 4 * (threadIdx.x + k * kThreads);
    v[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (i < n_valid && i < nb * kBlock) {
      v[k] = vec ? *reinterpret_cast<const float4*>(xr + i)
                 : make_float4(xr[i], xr[i + 1], xr[i + 2], xr[i + 3]);
    }
  }
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int f = threadIdx.x + k * kThreads;
    if (f < nb * 32) stage[stage_pos(f)] = v[k];
  }
  __syncthreads();  // the staged block floats are complete before any eighth reads them
  const int u = threadIdx.x;
  const int uc[1] = {min(u, nb * 16 - 1)};  // whole warps
  uint32_t words[1][2];
  float d[1];
  int sum[1];
  quantize_eighths<kPlanes, 1>(stage, uc, u & 31, words, d, sum);
  const int64_t tb = int64_t(tok) * n_blocks + b0;
  if (u < nb * 16) store_eighth(act + tb * 32, meta + tb, u, words[0], d[0], sum[0]);
}

// ---------------------------------------------------------------------------------------------
// The one-launch GEMV: matmul() with one token (prologue None, one matrix, Store) and
// matmul_fused (prologues, up to four matrices, epilogues).
//
// Every CTA (persistent: at most one per SM while there is work for all of them, so the
// prologue runs once per SM) does, in order:
//   1. issues its warps' first step of weight loads into registers and asks L2 for the first
//      64 KB of its weights (weights never depend on the previous kernel; GemvCta::
//      prefetch_ahead says why no more), then pdl_wait();
//   2. the prologue: the norm's sums, then every eighth of a block of p(x) quantised by
//      quantize_eighths into act / meta in shared memory — the same device code, on the same
//      floats, as the two-launch path's quantise kernel — from registers (GemvCta::quantise_x's
//      direct path) or from p(x) staged in shared memory (matmul.cuh's prologue_stage);
//   3. the product: CTAs hold `teams` teams of `slices` warps; each team strides over slots
//      (a row tile of one matrix; for SiluMulPair a row tile of both, gate then up) through
//      dot_chunk / sum_quad_lanes / sum_slices, the two-launch kernel's code in the same order,
//      with a named barrier per team (teams do not wait for each other) and double-buffered
//      slice sums (one barrier per slot). The epilogue (matmul.cuh's epilogue_store) runs on the
//      16 rows of the slot.
// So every output equals the two-launch path on p(x) bit for bit, and p(x) equals the unfused
// prologue kernels' output bit for bit.
//
// Where the time goes (H200, 2026-11-30; bench/RESULTS.md has the rows). With its weights hot
// in L2 the 5120->10240 GEMV is barely faster than from DRAM (7.37 vs 7.45 us), so it is not
// waiting for bytes: ncu (caches warm) finds it issuing ~0.5 instructions per scheduler-cycle
// with ~30% of the stalls on instruction fetch, ~1250 instructions per warp. So what pays is
// fewer instructions per warp: a thread per eighth of a block in the quantiser (was a quarter:
// 5 of 15 warps busy, ~2.3 us), the step walk by counting (was 4 integer divisions a step), one
// L2 prefetch per CTA (was 3 steps ahead per warp and step): 7.37 -> 6.05 us, tg128 205.8 ->
// 219.6. Per warp at e4154aa (ncu's executed-instruction counts): staging ~90, quantising ~270,
// each slot ~340, of which the block dot is ~130 and the per-step prefetch since removed a part.
// Tested and not the cause: the staging loads' order, the weight loads in flight, the
// exact-division fallback, the b1 mma (470 T weights/s; 17 clocks dependent). Slower: weights
// streamed into a shared-memory ring by bulk copies with small co-resident CTAs (commit
// 1e74d5d: 9.2 us, tg128 180.7); every GEMV warming the next launch's weights in L2 (tg128
// 193.2). Since (2026-12-01): two eighths per quantising thread, interleaved, ~1200
// instructions per warp at 5120->10240 (entry ~145, staging ~78, quantising ~386, each slot
// ~320). Measured and dropped:
//  - one kernel instantiation per epilogue (tg128 257.0 vs 271.6), and ssm_out's head-norm
//    prologue in an instantiation of its own (2026-12-01: ssm_out 8.79 -> 7.39 µs, but the
//    gate+up GEMV after it 12.35 -> 13.90, tg128 311.8 -> 301.6). Read as instruction fetch: a
//    GEMV that follows another kernel binary pays for fetching its own ~150 KB of SASS. So every
//    prologue and epilogue stays in this one kernel. Smaller code alone did not pay, though: one
//    staging pass for every prologue kind (products by 1 where a kind has no factor) took the
//    SASS from 147 to 119 KB but ffn_down from 9.58 to 11.24 µs a step, tg128 ~309 -> ~300:
//    what a GEMV executes counts more than its size;
//  - CTA pairs of a cluster quantising half the blocks each into both CTAs' shared memory
//    (271.5 vs 272.1: the pairs' scheduling eats the shorter prologue);
//  - (2026-12-02) the weights of a CTA's first rounds bulk-copied into shared memory before
//    pdl_wait (cp.async.bulk on an mbarrier per round and team, up to 227 KB a CTA): tg128 272
//    vs 319, the bytes landing no sooner than behind the L2 prefetch; and gate+up's prefetches
//    ordered round by round: no change. The first slot does not wait on where or when its
//    weights come from: ncu finds instruction fetch, not memory, the first stall;
//  - (2026-12-03, branch exp/s24-smem-gemv) the plain GEMV as a lean kernel of its own, each
//    CTA bulk-copying all of its row tiles into shared memory at entry: same bits, at best
//    5.90 µs at 5120->10240 (this kernel 6.18, read ceiling 3.41). Its bytes land ~2.6-3.1 µs
//    after its wait, before x is quantised; then the dots still take ~1.3 µs with every weight
//    in shared memory (ncu: barrier stalls first, long scoreboard 0.05). So what a per-layer
//    GEMV pays beyond its bytes is its dependent chain after the wait (stage, quantise, dots,
//    slice sums, stores), wherever the weights come from. A ballot quantiser (a warp per
//    block, REDUX for amax and sum) made the same codes but took 2.0-2.3 µs against ~1.0;
//  - (2026-12-06, H100) an epilogue warp a team, the slot's slice sums handed over by
//    mbarriers, so that the dot warps never wait for a slot's epilogue: with the extra warps a
//    scheduler holds 6 (16384 registers: 80 each), so the next step's weights went through
//    shared memory by cp.async; tg128 294 against 347 (one epilogue warp a CTA: 250), more
//    instructions and MIO stalls than the moves and fetch stalls it saved; and ConvSilu's taps
//    copied a slot ahead from the epilogue instead of at each slot's first step (the copies'
//    4 KB out of every step's path): tg128 337 against 348, the dot loop rescheduled;
//  - (2026-12-06, H100) each pair of blocks' plane counts weighed by one int8 mma (u8 counts x
//    s8 plane weights, a block per column), so that a lane scales whole blocks once instead of
//    its planes' share of every block (q1_dot.cuh's arithmetic; the dot loop 1478 instructions
//    against 1520): the plain GEMV 4-9% faster where a team runs several one-step slots
//    (5120->10240, 5120->17408), 15% slower on 17408-long rows (three steps in series before the
//    barrier), tg128 343-344 against 347-348: each step's dependent chain grew more than its issue
//    fell;
//  - (2026-12-07, H100) a warp per row tile, walking every slice of its slot itself with no team
//    barrier (as a template parameter: the team loop 1528 instructions, the warp's 1357): gate+up
//    13.82 -> 16.43 µs, the qkv step 9.57 -> 10.64, q+k+v 8.14 -> 10.11, tg128 332 against 365.
//    No Bonsai GEMV has a slot for every warp (gate+up's 1088 pair slots on 2640 warps), so 41%
//    of the warps each walked one slot's 5 chunks (10 for a pair) in turn while the rest idled,
//    where a team's critical path is 2-3 rounds of one slot's share;
//  - (2026-12-07, H100) each warp reading one 64-byte line of the parameters at entry, so that
//    the constant-cache misses ncu finds in the entry block overlap: gate+up 13.33 -> 14.10 µs,
//    tg128 376 -> 368. Under PDL the entry runs in the previous kernel's shadow.
// Seven more registers held across the dots made ptxas spill 12 bytes at its 96 (a slower GEMV
// everywhere): the conv epilogue's taps travel through shared memory instead.
//
// The codes hand-off (FusedGemv::codes_out / codes_in_blocks). ffn_down's CTAs each staged and
// quantised all 17408 floats of its x (~4 µs of its ~9.7, gemv_lab), the output of the gate+up
// GEMV before it. Three earlier versions had gate+up quantise each 128-row block once, its
// last team counting tiles by a fence and a global atomic: ffn_down 9.75 -> 7.94 µs but
// gate+up 12.98 -> 18.04 (every GPU-wide round trip on a team's critical path). Now CTA c's
// first slots are the row tiles of whole blocks it owns (GemvCta::locate; the rest of the
// rows are shared as before, as the last round), so a block is complete inside one CTA: its
// rows go to `stage` as they are stored, the warps arrive at a named barrier, warp 0
// quantises them (quantize_eighths, the consumer's own code) and stores the codes; the
// consumer's pdl_wait orders them, with no fence or atomic. Measured (H200, 2026-12-02,
// timeline): gate+up 12.90 -> 13.50 µs, ffn_down 9.66 -> 7.63, tg128 +2-3%. Handing the last
// partial round to one team of each CTA first (team-major slots, so that the quantising warp's
// team has none) lost 1% alone and gained nothing with the hand-off.

struct Q1GemvArgs {
  const uint4* bits[kMaxFusedMatrices];    // [n_tiles][n_quads][2][32] per matrix
  const uint4* scales[kMaxFusedMatrices];  // [n_tiles][n_quads][8]
  int slot_end[kMaxFusedMatrices];  // slots [slot_end[m-1], slot_end[m]) are matrix m's tiles
  int n_out[kMaxFusedMatrices];
  int n_quads, n_blocks, n_stage;  // n_blocks = n_quads * 4 (padded); n_stage = n_blocks * 128
  int slices, chunks, teams, n_slots;
  int off_act, off_meta, off_sums, off_red, off_taps;  // bytes into the dynamic shared memory
  uint64_t* trace;  // the lab's timeline (q1_0_gemv_traced: the kTraced kernel), else null
  // The codes hand-off (FusedGemv::codes_out / codes_in_blocks). Out: CTA c's first own_rounds
  // slots per team are the row tiles of its own 128-row blocks [c * own_blocks, (c + 1) *
  // own_blocks), whose codes it writes; in: the codes of x's first blocks_in blocks.
  uint32_t* act_out;
  ActMeta* meta_out;
  int own_blocks, own_rounds;
  const uint32_t* act_in;
  const ActMeta* meta_in;
  int blocks_in;
  EpilogueArgs epi;
  PrologueArgs pro;
  // Folded rows (FusedGemv::fold_*; none where fold_rows[1] is 0): CTA r < fold_rows[1]
  // computes row r of the BF16 matrices' concatenation (fold_rows[0] rows of matrix 0 first)
  // over fold_chunks chunks in fold_ranges ranges of fold_per chunks. A branch of the one
  // kernel every decode GEMV runs, not an instantiation of its own (H100, 2026-12-05,
  // bench/RESULTS.md): as its own kernel (160 KB of SASS beside the others' 153 KB) tg128 fell
  // 2.5% below the side launch's (the timeline: gate+up 14.44 -> 15.57 µs, ffn_down 7.50 ->
  // 8.04); as a branch it is level with it. Read as instruction fetch, as with the earlier
  // split instantiations (the kernel's comment); not traced.
  const uint4* fold_codes[2];  // [n_groups][fold_chunks][32] (matmul.cuh's chunked layout)
  float* fold_y[2];
  int fold_rows[2];
  int fold_chunks, fold_ranges, fold_per;
  FastDiv fold_div;  // by fold_per
  int off_fold;      // bytes into the dynamic shared memory: the chunks, then their parts
};

// The lab's timeline events (thread 0, so team 0): entry, pdl_wait returned, its warp's norm
// sums done, the sums' barrier passed (the prologue_sums marks; none without a norm), its
// eighths quantised, prologue done (barrier), then for slot k < kTraceSlotCount: its sums in
// shared memory, the team's barrier passed, its rows stored; exit (the last).
enum GemvTraceEvent {
  kTraceEntry,
  kTraceWaited,
  kTraceSummed,
  kTraceSumsBarrier,
  kTraceQuantised,
  kTracePrologue,
  kTraceSlots
};
enum GemvTraceSlotEvent { kTraceSums, kTraceBarrier, kTraceStored, kTraceSlotEvents };
constexpr int kTraceSlotCount = (kGemvTraceEvents - 1 - kTraceSlots) / kTraceSlotEvents;

// A team's place in its walk over steps (slot, pair matrix ms, chunk c), with the matrix m and
// row tile of (slot, ms). GemvCta::advance moves it by counting, without a division: the walk's
// bookkeeping runs on every warp of every step, in a kernel about half bound by instruction
// issue (ncu, H200), where each step used to compute sub / chunks, sub % chunks and the slot's
// matrix afresh (4 integer divisions in the SASS). Its share of the gain was not isolated: with
// the eighth-block quantiser, a slot went from ~1.5 to ~1.3 us.
// The codes hand-off: the named barrier of a CTA's hand-off (teams use 1..teams), and the
// row tiles of a 128-row block.
constexpr int kCodesBarrier = 15;
constexpr int kTilesPerBlock = kBlock / kTileRows;

// Whether a one-launch GEMV's prologue takes the direct path (GemvCta::quantise_x says what
// it is): the device's choice, and the host's fold check, since folded rows are summed on
// that path only (fold_refusal). One predicate, so the two cannot drift apart.
__host__ __device__ inline bool direct_prologue(const PrologueArgs& p, int blocks_in, int n_blocks,
                                                int threads) {
  return p.vec &&
         (p.kind == Prologue::None ||
          (p.kind == Prologue::RmsNorm && blocks_in == 0 && norm::consecutive_tiles(p.chunk))) &&
         (n_blocks - blocks_in) * 16 <= threads;
}

// eighth_sums takes thread j's eighth of x as the norm's virtual thread j: that holds while the
// canonical order has one tile for every chunk the direct path takes (n <= 8 * threads), i.e.
// while norm_threads is not capped below a GEMV CTA's threads.
static_assert(32 * gemv_max_warps(2) <= norm::kMaxNormThreads &&
                  32 * gemv_max_warps(4) <= norm::kMaxNormThreads,
              "the direct prologue's eighths must be the norm's virtual threads");

struct GemvStep {
  int slot, ms, c;
  int m, tile;
  int round;  // the team's slots before this one
};

// One thread's view of a one-launch GEMV CTA: the prologue, the per-slot product, reduction
// and epilogue. Shared memory (host: gemv_layout): staged p(x) [n_stage floats] | act
// [n_blocks][32] | meta [n_blocks] | norm sums and scales | slice sums [2 parities][2 pair
// matrices][warps][16] | ConvSilu's taps [teams][16][kConvTapFloats] | folded rows: the row's
// chunks [fold_chunks] (uint4) and their parts [fold_per][fold_ranges].
template <int kQ, bool kTraced>
struct GemvCta {
  const Q1GemvArgs& a;
  float4* stage;
  uint32_t* act;
  ActMeta* meta;
  float* sums;
  float* scales;
  float* red;
  float* taps;  // ConvSilu: [teams][16 rows][kConvTapFloats]
  int lane, warp, n_warps, team, slice;
  bool pair, conv;
  int r16;             // this thread's row of a slot in the epilogue (< 16: one of the team's 16)
  int q_begin, quads;  // quads: of this warp's slice
  BmmaMath math;
  float2 acc = make_float2(0.0f, 0.0f);
  int parity = 0;
  int slots_done = 0;

  __device__ GemvCta(const Q1GemvArgs& args, unsigned char* smem)
      : a(args),
        stage(reinterpret_cast<float4*>(smem)),
        act(reinterpret_cast<uint32_t*>(smem + args.off_act)),
        meta(reinterpret_cast<ActMeta*>(smem + args.off_meta)),
        sums(reinterpret_cast<float*>(smem + args.off_sums)),
        scales(sums + args.pro.n_sums),
        red(reinterpret_cast<float*>(smem + args.off_red)),
        taps(reinterpret_cast<float*>(smem + args.off_taps)),
        lane(threadIdx.x & 31),
        warp(threadIdx.x >> 5),
        n_warps(blockDim.x >> 5),
        team(warp / args.slices),
        slice(warp % args.slices),
        pair(args.epi.kind == Epilogue::SiluMulPair),
        conv(args.epi.kind == Epilogue::ConvSilu),
        r16(static_cast<int>(threadIdx.x) - team * args.slices * 32),
        q_begin(slice * args.chunks * kQ),
        quads(max(0, min(args.chunks * kQ, args.n_quads - q_begin))),
        math(lane) {}

  // This epilogue thread's conv taps (r16 < 16).
  __device__ float* my_taps() const { return taps + (team * kTileRows + r16) * kConvTapFloats; }

  // Timeline event e of this CTA (thread 0 only), in the kTraced kernel alone (the lab's
  // q1_0_gemv_traced): the decode kernel carries no stamp code, where it paid three checks of
  // a.trace per slot on every warp, in a kernel about half bound by instruction issue.
  // Measured (H200, 2026-12-01): ~1032 instructions per warp at 5120->10240 (ncu; ~1200
  // before), timeline 3349.8 -> 3248.3 µs/token, tg128 280.8 -> 289.8.
  __device__ void stamp(int e) const {
    if constexpr (kTraced) {
      if (threadIdx.x != 0 || e >= kGemvTraceEvents) return;
      uint64_t t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      a.trace[blockIdx.x * kGemvTraceEvents + e] = t;
      a.trace[(gridDim.x + blockIdx.x) * kGemvTraceEvents + e] = clock64();
    }
  }

  // Event e of this thread's `slots_done`-th slot.
  __device__ void stamp_slot(int e) const {
    if (slots_done < kTraceSlotCount) stamp(kTraceSlots + kTraceSlotEvents * slots_done + e);
  }

  // Codes out: the first row tile of this CTA's own blocks.
  __device__ int own_tile0() const { return static_cast<int>(blockIdx.x) * a.own_rounds * a.teams; }

  // A pair with own rounds takes its shared rounds team-major, last team first: CTA b's
  // shared slots are b + j * grid past the own rounds, team teams - 1 - j % teams (the own
  // rounds' tiles do not depend on the slot). Gate+up's 32 leftover pairs then run on 32 CTAs'
  // last teams, not on all four teams of 8 CTAs. Set here, after the prologue, and not in
  // first_step: there the same slot made ptxas spill inside the dot loop (a select: 16 B; host
  // multipliers: 4 B; scripts/bmma_regs.py); here the loop differs from the slot-major build's
  // in 21 of its 1520 instructions, 19 of them one run of register choices after the dots.
  __device__ void team_major_shared_rounds(GemvStep& st) const {
    if (a.own_rounds > 0)
      st.slot = (a.teams - 1 - team) * static_cast<int>(gridDim.x) + static_cast<int>(blockIdx.x);
  }
  // The first step of this team: its first slot, matrix and tile.
  __device__ GemvStep first_step() const {
    GemvStep st{static_cast<int>(blockIdx.x) * a.teams + team, 0, 0, 0, 0, 0};
    locate(st);
    return st;
  }
  // The step after st (st.slot >= a.n_slots: past the end).
  __device__ void advance(GemvStep& st) const {
    if (++st.c < a.chunks) return;
    st.c = 0;
    if (pair && st.ms == 0) {
      st.ms = st.m = 1;
      return;
    }
    st.ms = 0;
    st.slot += gridDim.x * a.teams;
    ++st.round;
    locate(st);
  }
  // st.m and st.tile of st.slot (slots only grow along a walk: m never goes back).
  __device__ void locate(GemvStep& st) const {
    if (pair) {
      st.m = st.ms;
      st.tile = st.round < a.own_rounds ? own_tile0() + st.round * a.teams + team : st.slot;
      return;
    }
    while (st.m + 1 < kMaxFusedMatrices && st.slot >= a.slot_end[st.m]) ++st.m;
    st.tile = st.slot - (st.m > 0 ? a.slot_end[st.m - 1] : 0);
  }
  // Thread 0 asks L2 for the first kL2AheadBytes of the weights this CTA will read, in the
  // order it reads them: per round of its slots, the contiguous row tiles of each matrix (a
  // few bulk prefetches in all; a pair's shared tiles, team-major, one by one; a pair's two
  // matrices half each). One thread does it once:
  // asked per step by every warp, the same requests cost instructions on all 15 warps, in a
  // kernel about half bound by instruction issue (ncu, H200: ~0.5 issued per scheduler-cycle).
  // Not all of its weights: the CTA enters while the kernel before it still streams, and its
  // whole share asked then slowed that kernel (all exact rungs, H100, 2026-12-07: 64 KB,
  // tg128 365 -> 376; 32 KB the same; the decode floor streams fastest with 64 KB too). Nor
  // the rest later: asked right after the wait or after the prologue, it slowed this GEMV
  // itself (tg128 376 -> 354 / 357): the warps' own loads keep up with DRAM better. Nor more
  // for one GEMV: ffn_down's whole share (117 KB) asked ahead made gate+up, still running,
  // 13.19 -> 13.82 µs and ffn_down no faster, tg128 378.5 -> 370-372; gate+up's third-round
  // pairs asked besides the 64 KB took 0.18 µs off it and nothing off tg128 (H100, 2026-12-07).
  static constexpr uint32_t kL2AheadBytes = 64u << 10;
  struct L2Ask {
    uint32_t left;
    __device__ void operator()(const uint4* p, uint32_t bytes) {
      const uint32_t n = min(bytes, left);
      prefetch_l2(p, n);
      left -= n;
    }
  };
  __device__ void prefetch_ahead() const {
    if (threadIdx.x != 0) return;
    const int stride = gridDim.x * a.teams;
    const uint32_t tile_bits = uint32_t(a.n_quads) * 1024u,
                   tile_scales = uint32_t(a.n_quads) * 128u;
    if (a.own_rounds > 0) {  // pair: the own tiles, then the shared rounds (team-major)
      for (int m = 0; m < 2; ++m) {
        L2Ask ask{kL2AheadBytes / 2};
        const int t0 = own_tile0(), n = a.own_rounds * a.teams;
        ask(a.bits[m] + int64_t(t0) * a.n_quads * 64, uint32_t(n) * tile_bits);
        ask(a.scales[m] + int64_t(t0) * a.n_quads * 8, uint32_t(n) * tile_scales);
        for (int s = a.own_rounds * stride + blockIdx.x; s < a.n_slots; s += gridDim.x) {
          ask(a.bits[m] + int64_t(s) * a.n_quads * 64, tile_bits);
          ask(a.scales[m] + int64_t(s) * a.n_quads * 8, tile_scales);
        }
      }
      return;
    }
    L2Ask ask{kL2AheadBytes};
    for (int s0 = blockIdx.x * a.teams + a.own_rounds * stride; s0 < a.n_slots; s0 += stride) {
      const int s1 = min(s0 + a.teams, a.n_slots);
      for (int m = 0; m < kMaxFusedMatrices; ++m) {
        const int begin = pair || m == 0 ? 0 : a.slot_end[m - 1];
        const int end = pair ? (m < 2 ? a.n_slots : 0) : a.slot_end[m];
        const int t0 = max(s0, begin) - begin, t1 = min(s1, end) - begin;
        if (t1 <= t0) continue;
        ask(a.bits[m] + int64_t(t0) * a.n_quads * 64, uint32_t(t1 - t0) * tile_bits);
        ask(a.scales[m] + int64_t(t0) * a.n_quads * 8, uint32_t(t1 - t0) * tile_scales);
      }
    }
  }
  // This warp's chunk of step st: its first quad within the row tile, and how many of its kQ
  // quads exist (may be <= 0).
  __device__ int chunk_quad(const GemvStep& st) const { return q_begin + st.c * kQ; }
  __device__ int chunk_quads(const GemvStep& st) const { return quads - st.c * kQ; }

  // The codes of p(x) into act / meta: those that came in copied (copy_codes_in), the rest
  // quantised (quantise_x). Every thread of the CTA calls it (barriers). With every block's
  // codes in, quantise_x has nothing to do (the host passes no prologue then), yet skipping
  // the call made ssm_out 5.17 -> 4.63 µs and the gate+up GEMV after it 12.91 -> 13.68, tg128
  // 348.4 / 348.7 -> 344.5 / 343.3 (H200, 2026-12-04, same call). Not understood: the only
  // difference is the code around an empty call.
  __device__ void prologue() {
    copy_codes_in();
    quantise_x();
    stamp(kTraceQuantised);
    __syncthreads();  // act / meta (and the folded row's parts) are complete
  }

  // Folded rows (FusedGemv::fold_*, where fold_rows[1] > 0). Their chunks and parts in shared
  // memory (found from the parameters on each use: pointers held from the constructor made
  // ptxas spill).
  __device__ uint4* fold_chunks() const {
    return reinterpret_cast<uint4*>(reinterpret_cast<unsigned char*>(stage) + a.off_fold);
  }
  __device__ float* fold_parts() const {
    return reinterpret_cast<float*>(fold_chunks() + a.fold_chunks);
  }
  __device__ int* fold_done() const {  // warps past the prologue
    return reinterpret_cast<int*>(fold_parts() + a.fold_per * a.fold_ranges);
  }
  // The CTA's row r and matrix m, -1 where it has none.
  __device__ int fold_matrix(int& r) const {
    r = static_cast<int>(blockIdx.x);
    if (r >= a.fold_rows[1]) return -1;
    if (r < a.fold_rows[0]) return 0;
    r -= a.fold_rows[0];
    return 1;
  }
  // This thread's chunk of the CTA's folded row, chunk u = its eighth of x (the direct
  // prologue's one eighth a thread), copied into shared memory before pdl_wait (weights never
  // depend on the previous kernel): held in registers through the prologue instead, it made
  // ptxas spill 28 bytes at the kernel's 96.
  __device__ void stage_fold_chunk() const {
    if (threadIdx.x == 0) *fold_done() = 0;  // read after the prologue's barrier
    int r;
    const int m = fold_matrix(r), u = static_cast<int>(threadIdx.x);
    if (m < 0 || u >= a.fold_chunks) return;
    cp_async_or_zero(fold_chunks() + u,
                     a.fold_codes[m] + (int64_t(r / 32) * a.fold_chunks + u) * 32 + r % 32, true);
    cp_async_commit();
  }
  // Chunk u's part on the eighth's p(x), as chunked_dot forms it, into [u % per][u / per]: its
  // range's parts lie one range apart, so the range sums below read them without conflicts.
  __device__ void fold_part(const float (&e8)[8]) const {
    int r;
    const int u = static_cast<int>(threadIdx.x);
    if (fold_matrix(r) < 0 || u >= a.fold_chunks) return;
    cp_async_wait<0>();  // this thread's own copy
    float w[8];
    BF16Format::decode(fold_chunks()[u], 0, w);
    const int range = a.fold_div.div(u);
    fold_parts()[(u - range * a.fold_per) * a.fold_ranges + range] = chunk_fma(w, e8, 0.0f);
  }
  // The first warp past the prologue: lane k adds range k's parts in chunk order from 0, then
  // every range's sum is added in range order from 0 (chunked_fused_kernel's order) and lane 0
  // stores the row.
  __device__ void fold_sum() const {
    int r;
    const int m = fold_matrix(r);
    if (m < 0) return;
    const int order = __shfl_sync(kFullMask, lane == 0 ? atomicAdd(fold_done(), 1) : 0, 0);
    if (order != 0) return;
    float acc = 0.0f;
    if (lane < a.fold_ranges) {
      const int c0 = min(a.fold_chunks, lane * a.fold_per);
      const int c1 = min(a.fold_chunks, c0 + a.fold_per);
      for (int c = c0; c < c1; ++c)
        acc = add_chunk(acc, 1.0f, fold_parts()[(c - c0) * a.fold_ranges + lane]);
    }
    float sum = 0.0f;
    for (int k = 0; k < a.fold_ranges; ++k) sum += __shfl_sync(kFullMask, acc, k);
    if (lane == 0) a.fold_y[m][r] = sum;
  }

  // Blocks [blocks_in, n_blocks) of p(x) quantised into act / meta, on one of two paths:
  //   Direct (x, norm 16-byte aligned, no norm or one RmsNorm over all of x (no codes in,
  //     norm::consecutive_tiles: more than 256 floats), at most one eighth of a block a thread:
  //     every normed GEMV of the decode): the thread loads its eighth of x, adds the norm's
  //     squares from it (eighth_sums), then computes the scale itself and p(x) of its eighth
  //     in registers.
  //   Staged (the rest): the sums and scales (prologue_sums, prologue_scales_of_sums), p(x)
  //     staged in shared memory (prologue_stage, shared with the chunked formats), a barrier,
  //     then read from there.
  // Both quantise the same floats as the two-launch quantise kernel, by one quantise_blocks
  // (a quantiser is ~25-45 KB of SASS: a second instantiation would grow the kernel a third).
  // Staging cost the normed GEMVs 0.25-0.5 µs from the sums' barrier to the scales, and its
  // loads of x and the norm weight after the scales another round trip to L2 (gemv_lab,
  // H200, 2026-12-04), 128 such GEMVs a token. The norm weight is loaded as the quantiser
  // needs it (asked into L1 before pdl_wait): loaded with x and held across the sums, it made
  // ptxas spill 32 bytes and the decode slower (tg128 346.2 / 345.9 against 355.0 / 352.6,
  // same call).
  __device__ void quantise_x() {
    const PrologueArgs& p = a.pro;
    const bool direct = direct_prologue(p, a.blocks_in, a.n_blocks, static_cast<int>(blockDim.x));
    const bool normed = p.kind == Prologue::RmsNorm;
    const auto mark = [&](int k) { stamp(kTraceSummed + k); };
    float4 x4[2];
    if (direct) {
      load_eighth(p.x, x4);
      if (normed) eighth_sums(x4, mark);
    } else {
      prologue_sums(p, sums, mark);
      prologue_scales_of_sums(p, sums, scales);
      prologue_stage(
          p, a.n_stage, scales, [&](int f, float4 v) { stage[stage_pos(f)] = v; },
          a.blocks_in * 32);
      __syncthreads();  // p(x) is staged before any eighth reads it
    }
    // The direct eighth's p(x) by the RmsNorm arithmetic, where no norm is scale 1 and
    // weight 1 (x·1·1 = x exactly): one code for both kinds.
    const float scale = direct && normed ? prologue_chunk_scale(p, sums, 0) : 1.0f;
    // The direct path's u is this thread's eighth (or, past the end, a clamped copy that is
    // never stored).
    quantise_blocks(
        [&](int u, float(&e8)[8]) {
          if (direct) {
            const float4 one = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
            float4 w4[2] = {one, one};
            if (normed) load_eighth(p.norm, w4);
            float x[8], w[8];
            eighth_floats(x4[0], x4[1], x);
            eighth_floats(w4[0], w4[1], w);
            constexpr Prologue kRms = Prologue::RmsNorm;
#pragma unroll
            for (int e = 0; e < 8; ++e) e8[e] = prologue_value<kRms>(x[e], 0.0f, w[e], scale);
            if (a.fold_rows[1] > 0) fold_part(e8);
          } else {
            load_staged_eighth(stage, u, e8);
          }
        },
        act, meta, a.blocks_in, a.n_blocks, threadIdx.x, blockDim.x);
  }
  // The norm's virtual-warp sums into sums[] (what prologue_sums writes), then a barrier,
  // from this thread's eighth of x (the direct path's: from block 0, more than 256 floats):
  // thread j's eighth is virtual thread j's tile in norm.cuh's order, so its squares need no
  // second load of x. It replaced prologue_sums<1>, which loaded x again in the old order
  // (eight scalar loads a thread). Measured (H100, 2026-12-06, same call): gate+up 14.47 ->
  // 13.86 µs, the qkv step 9.82 -> 9.60, q+k+v 8.50 -> 8.16; tg128 361.0 -> 365.9.
  template <class Mark>
  __device__ void eighth_sums(const float4 (&x4)[2], const Mark& mark) const {
    float v[norm::kPerThread];
    eighth_floats(x4[0], x4[1], v);
    const float s = detail::warp_sum(norm::add_tile_squares(v, 0.0f));
    if (lane == 0 && warp < norm::norm_warps(a.pro.chunk)) sums[warp] = s;
    mark(0);
    __syncthreads();  // every virtual warp's sum is in shared memory before the scale adds them
    mark(1);
  }
  // This thread's eighth of v (the direct path's): float4s 2u, 2u + 1, zeros past n_in (a
  // multiple of 4 there).
  __device__ void load_eighth(const float* v, float4 (&f)[2]) const {
    const int u = a.blocks_in * 16 + static_cast<int>(threadIdx.x);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int i = 8 * u + 4 * k;
      f[k] = i < a.pro.n_in ? *reinterpret_cast<const float4*>(v + i)
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }

  // Codes in: the codes of x's first blocks_in blocks, written by the GEMV before
  // (codes out), copied instead of staged and quantised (the prologue's barrier orders them).
  // A batch's loads (codes and meta) all go out before its stores: a store to shared memory
  // through a generic pointer may alias the source as far as the compiler knows, so a plain
  // load-store loop waits for L2 once a pass, and the meta once more (ffn_down's 136 blocks
  // on 576 threads: three round trips, ~2 µs from the wait to the codes in the lab's trace).
  // Measured against the plain loop (H100, 2026-12-06, same call): ffn_down 7.97 -> 7.64 µs,
  // ssm_out 5.34 -> 5.07, attn_output 5.86 -> 5.55; tg128 342.7 -> 348.2.
  // ffn_down's x past the codes (4 blocks, quantised after the copy) is loaded after the
  // copy's stores, a second round trip. Left so (H100, 2026-12-06, same call): asked of L1
  // before the copy, the lab's wait -> quantised went 1.79 -> 1.54 µs but wait -> exit 6.14 ->
  // 6.15 µs, and the decode's ffn_down took 7.71 µs against 7.61, tg128 -0.5%; held in
  // registers across the copy, or sent by cp.async, ptxas spilled 36 or 8 bytes at 96.
  __device__ void copy_codes_in() {
    constexpr int kBatch = 4;
    const uint4* src = reinterpret_cast<const uint4*>(a.act_in);
    const int2* msrc = reinterpret_cast<const int2*>(a.meta_in);
    const int n = a.blocks_in * 8, step = static_cast<int>(blockDim.x);
    for (int i0 = threadIdx.x; i0 < n; i0 += kBatch * step) {
      uint4 v[kBatch];
      int2 m[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int i = i0 + k * step;
        if (i < n) v[k] = __ldcg(src + i);
        if (i < a.blocks_in) m[k] = __ldcg(msrc + i);  // blocks_in < n: every meta on the way
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int i = i0 + k * step;
        if (i < n) reinterpret_cast<uint4*>(act)[i] = v[k];
        if (i < a.blocks_in) meta[i] = ActMeta{__int_as_float(m[k].x), m[k].y};
      }
    }
  }

  // Codes out: after its last own slot every other warp arrives (GemvCta::process); warp 0,
  // past its slot loop, waits for all, then quantises the CTA's own blocks from `stage` (the
  // rows' outputs, in the staging layout) with quantize_eighths, as the consumer's prologue
  // would, into act_out / meta_out. No GPU-wide round trip: the consumer's pdl_wait orders the
  // codes. After the loop, not in it: there its quantiser was 454 of the loop's 1519
  // instructions (scripts/bmma_regs.py), code that every step of every GEMV jumped over.
  // Measured (H100, 2026-12-07, same call): tg128 376.6 / 377.0 -> 379.1 / 379.2, timeline
  // 2623.8 -> 2590.0 µs/token (gate+up 13.49 -> 13.20, ffn_down 7.85 -> 7.64).
  __device__ void hand_off_codes() {
    if (warp != 0 || a.own_rounds == 0) return;
    bar_sync(kCodesBarrier, blockDim.x);
    const int n = a.own_blocks * 16, u_base = static_cast<int>(blockIdx.x) * n;
    for (int u0 = 0; u0 < n; u0 += 32) {
      const int uc[1] = {min(u0 + lane, n - 1)};
      uint32_t words[1][2];
      float d[1];
      int sum[1];
      quantize_eighths<true, 1>(stage, uc, lane, words, d, sum);
      if (u0 + lane < n)
        store_eighth(a.act_out, a.meta_out, u_base + u0 + lane, words[0], d[0], sum[0]);
    }
  }

  // Step s on its loaded weights t: dot_chunk / sum_quad_lanes / sum_slices, the two-launch
  // kernel's code in the same order. A slot's last step ends with the team's named barrier
  // (teams do not wait for each other; slice sums double-buffered: one barrier per slot) and
  // the epilogue (matmul.cuh's epilogue_store) on the slot's 16 rows.
  __device__ void process(const GemvStep& s, const ChunkLoads<kQ>& t) {
    // A conv channel's taps are copied at its slot's first step: the dots hide their latency.
    if (conv && s.c == 0 && s.m == 0 && r16 < kTileRows) {
      const int64_t row = int64_t(s.tile) * kTileRows + r16;
      if (row < a.n_out[0]) issue_conv_taps(a.epi, row, my_taps());
    }
    const int q0 = chunk_quad(s);
    const float2 p = dot_chunk<BmmaMath, kQ, true>(
        math, act + q0 * kQuadBlocks * 32 + BmmaMath::lane_offset(lane), meta + q0 * kQuadBlocks, t,
        chunk_quads(s), lane);
    acc.x += p.x;
    acc.y += p.y;
    if (s.c != a.chunks - 1) return;
    const float2 r = sum_quad_lanes(acc);
    acc = make_float2(0.0f, 0.0f);
    if ((lane & 3) == 0) {
      float* slot = red + ((parity * 2 + s.ms) * n_warps + warp) * kTileRows + (lane >> 2);
      slot[0] = r.x;
      slot[8] = r.y;
    }
    if (pair && s.ms == 0) return;
    stamp_slot(kTraceSums);
    // The team's slice sums of this slot are in shared memory. The other parity's buffer was
    // read before every team thread arrived here, so the next slot may overwrite it.
    bar_sync(1 + team, 32 * a.slices);
    stamp_slot(kTraceBarrier);
    if (r16 < kTileRows) {
      const int m = pair ? 0 : s.m;
      const int64_t row = int64_t(s.tile) * kTileRows + r16;
      if (row < a.n_out[m]) {
        const float* base = red + (parity * 2 * n_warps + team * a.slices) * kTileRows + r16;
        const float s0 = sum_slices(base, a.slices, kTileRows);
        const float s1 = pair ? sum_slices(base + n_warps * kTileRows, a.slices, kTileRows) : 0.0f;
        const ConvTaps t =
            conv && m == 0 ? conv_taps_arrived(my_taps(), a.epi.conv_kernel) : ConvTaps{};
        const float y = epilogue_store(a.epi, m, row, s0, s1, t);
        if (slots_done < a.own_rounds) {  // codes out: the row, in its own block's staging
          const int e = static_cast<int>(row) - own_tile0() * kTileRows;
          reinterpret_cast<float*>(stage)[4 * stage_pos(e >> 2) + (e & 3)] = y;
        }
      }
    }
    if (slots_done + 1 == a.own_rounds && warp != 0) bar_arrive(kCodesBarrier, blockDim.x);
    stamp_slot(kTraceStored);
    ++slots_done;
    parity ^= 1;
  }
};

// The teams kernel. Every CTA (persistent: at most one per SM while there is work for all of
// them, so the prologue runs once per SM) issues its warps' first step of weight loads into
// registers and asks L2 for the first 64 KB of its weights (weights never depend on the previous
// kernel), then pdl_wait(), the prologue, and the product: `teams` teams of `slices` warps,
// each team striding over slots (a row tile of one matrix; for SiluMulPair a row tile of both,
// gate then up), the next step's loads issued before the current one is processed; last, with
// codes out, warp 0's hand-off.
template <int kQ, bool kTraced>
__global__ void __launch_bounds__(32 * gemv_max_warps(kQ))
    q1_gemv_kernel(const __grid_constant__ Q1GemvArgs a) {
  extern __shared__ float4 smem4[];
  GemvCta<kQ, kTraced> c(a, reinterpret_cast<unsigned char*>(smem4));
  // The first quad of this warp's chunk of a step, in quads from its matrix's base.
  const auto quad_of = [&](const GemvStep& st) {
    return int64_t(st.tile) * a.n_quads + c.chunk_quad(st);
  };
  const auto load = [&](const GemvStep& st, ChunkLoads<kQ>& t) {
    if (st.slot >= a.n_slots) return;
    const int64_t q = quad_of(st);
    load_quads<kQ>(a.bits[st.m] + q * 64 + c.lane, a.scales[st.m] + q * 8 + (c.lane >> 2),
                   c.chunk_quads(st), t);
  };
  ChunkLoads<kQ> buf0, buf1;
  GemvStep st = c.first_step();
  load(st, buf0);
  if (a.fold_rows[1] > 0) c.stage_fold_chunk();
  c.prefetch_ahead();
  prologue_prefetch_constants(a.pro);
  c.stamp(kTraceEntry);
  pdl_launch_dependents();  // the next kernel may start its own weight loads
  pdl_wait();               // x, gate and the residual come from earlier kernels
  prologue_prefetch_inputs(a.pro);
  c.stamp(kTraceWaited);
  c.prologue();
  // Here, not after the slot loop: any fold code after the loop made ptxas give a chunk's first
  // two BMMAs one B register, so they ran one after the other (scripts/bmma_regs.py). Measured
  // (H100, 2026-12-05): gate+up 16.22 -> 14.86 µs, ffn_down 8.41 -> 7.99, the qkv step 9.82 ->
  // 10.22 (this warp's slots now wait for the sum), tg128 +2.5-3.2%. ptxas spills 8 bytes here
  // (three loads near the dot; none without the fold). Not better by ptxas -v and bmma_regs.py:
  // a fixed warp summing (16 B spilled, four serialised BMMAs; with its first loads deferred
  // past the sum, four serialised), the sum inside prologue() or its loops kept rolled (the same
  // registers), the sum out of line (92 B spilled).
  if (a.fold_rows[1] > 0) c.fold_sum();
  c.stamp(kTracePrologue);
  c.team_major_shared_rounds(st);
  // The next step's loads go out before the current step is processed, into buf1, moved to buf0
  // after it (24 register moves a step at kQ = 2). Not unrolled by two (both buffers in registers,
  // no moves): that kept two copies of the step's code (the dots, the reduction, every epilogue) in
  // the hot loop, and instruction fetch is what the fused GEMVs wait on most. ncu (H200,
  // 2026-12-02, decode layer 0's four GEMVs): no_instruction 25-36% of the stall samples, long
  // scoreboard (memory) 6-8%. One copy: qkv step 13.24 -> 12.93 µs, q+k+v 8.73 -> 8.08,
  // ffn_down 7.67 -> 7.39, tg128 316.2 / 316.8 -> 324.2 / 324.4 (bench/RESULTS.md).
#pragma unroll 1
  while (st.slot < a.n_slots) {
    GemvStep s1 = st;
    c.advance(s1);
    load(s1, buf1);
    c.process(st, buf0);
    buf0 = buf1;
    st = s1;
  }
  c.hand_off_codes();
  c.stamp(kGemvTraceEvents - 1);
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
  return v != Q1Variant::kDp4a2 && v != Q1Variant::kImma && v != Q1Variant::kImmaPairs;
}

// How the two-launch product is cut: slices x chunks (q1_cut), rpc row tiles per CTA, grid.x
// CTAs striding over the row-tile groups.
struct Plan {
  int slices = 0, chunks = 0, rpc = 0, threads = 0;
  unsigned grid = 0;
  size_t smem = 0;
};

// Picks rpc with the fewest sequential steps on the busiest warp (waves of CTAs), preferring
// the first on ties: one wave of equal CTAs keeps every SM streaming to the end, where a
// partial second wave leaves most of the GPU idle.
template <class Kernel>
Plan plan_q1(Kernel* kernel, int kQ, int n_tiles, int n_quads, int tokens_per_cta) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int, int>, Plan> cache;
  const auto key =
      std::make_tuple(reinterpret_cast<const void*>(kernel), n_tiles, n_quads, tokens_per_cta);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const Q1Cut cut = q1_cut(kQ, n_quads);
  Plan best;
  int64_t best_waves = 0;
  for (int rpc : {1, std::max(1, 8 / cut.slices)}) {
    Plan p;
    p.slices = cut.slices;
    p.chunks = cut.chunks;
    p.rpc = rpc;
    p.threads = 32 * cut.slices * rpc;
    p.smem = sizeof(float) * cut.slices * rpc * tokens_per_cta * kTileRows;
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, p.threads, p.smem));
    if (per_sm < 1) continue;
    const int64_t groups = ceil_div(n_tiles, rpc), ctas = int64_t(per_sm) * sm_count();
    const int64_t waves = ceil_div(groups, ctas);
    p.grid = static_cast<unsigned>(std::min(groups, ctas));
    if (best.threads == 0 || waves < best_waves) {
      best = p;
      best_waves = waves;
    }
  }
  if (best.threads == 0) fail("cuda matmul q1_0: no launch shape fits n_in = {}", n_quads * 512);
  cache.emplace(key, best);
  return best;
}

// The product's operands: matrix, codes and scales, y (the cut and launch shape left unset).
Q1Args q1_operands(const GpuMatrix& w, const void* act, float* y, int64_t ldy, int64_t n_tokens) {
  const Geometry geo = geometry(w.n_in);
  Q1Args a{};
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
  return a;
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
    Q1Args a = q1_operands(w, act, y, ldy, n_tokens);
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

// The int8 tensor-core product: a CTA per kImmaWarps row tiles x kImmaTokens tokens.
template <bool kPairs>
struct Q1ImmaLaunch {
  static dim3 grid(const GpuMatrix& w, int64_t n_tokens) {
    return dim3(static_cast<unsigned>(ceil_div(w.n_row_tiles, kImmaWarps)),
                static_cast<unsigned>(ceil_div(n_tokens, kImmaTokens)));
  }
  static void run(const GpuMatrix& w, const void* act, float* y, int64_t ldy, int64_t n_tokens,
                  bool pdl, cudaStream_t s) {
    launch(&q1_imma_kernel<kPairs>, grid(w, n_tokens), dim3(kImmaWarps * 32), 0, pdl, s,
           q1_operands(w, act, y, ldy, n_tokens));
  }
  static std::string describe(const GpuMatrix& w, int64_t n_tokens) {
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, &q1_imma_kernel<kPairs>));
    const dim3 g = grid(w, n_tokens);
    return fmt::format("int8 mma{}: {} tiles x {} tokens a CTA, {} x {} CTAs x {} threads, {} regs",
                       kPairs ? " (group pairs)" : "", kImmaWarps, kImmaTokens, g.x, g.y,
                       kImmaWarps * 32, attr.numRegs);
  }
};

// Calls fn with the launcher (Q1Launch or Q1ImmaLaunch) of variant v.
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
    case Q1Variant::kImma:
      return fn(Q1ImmaLaunch<false>{});
    case Q1Variant::kImmaPairs:
      return fn(Q1ImmaLaunch<true>{});
    case Q1Variant::kDp4a2:
      break;
  }
  return fn(Q1Launch<Dp4aMath, 2, true>{});
}

// A one-launch GEMV's launch shape.
struct GemvShape {
  Q1GemvArgs a{};
  int threads = 0;
  unsigned grid = 0;
  size_t smem = 0;
};

// The one-launch GEMV's arguments apart from its launch shape: matrices, slots, the cut, the
// prologue.
template <int kQ>
Q1GemvArgs gemv_args(const FusedGemv& f) {
  Q1GemvArgs a{};
  const Geometry geo = geometry(f.w[0]->n_in);
  a.n_quads = static_cast<int>(geo.n_quads);
  a.n_blocks = static_cast<int>(geo.n_blocks_padded);
  a.n_stage = a.n_blocks * kBlock;
  const bool pair = f.epilogue == Epilogue::SiluMulPair;
  int slots = 0;
  for (int i = 0; i < kMaxFusedMatrices; ++i) {
    if (i < f.n) {
      const GpuMatrix& w = *f.w[i];
      a.bits[i] = w.codes.as<const uint4>();
      a.scales[i] = w.scales.as<const uint4>();
      a.n_out[i] = static_cast<int>(w.n_out);
      slots = pair ? static_cast<int>(w.n_row_tiles) : slots + static_cast<int>(w.n_row_tiles);
    }
    a.slot_end[i] = slots;  // past f.n: never reached (slot < n_slots)
  }
  a.n_slots = slots;
  a.epi = epilogue_args(f);
  // Codes of the whole of x in: its prologue ran where they were made (CodesOut: the GDN
  // recurrence, attention), so nothing is staged but the padding's zeros.
  const bool all_in = int64_t(f.codes_in_blocks) * kBlock == f.w[0]->n_in;
  FusedGemv staged = f;
  if (all_in) staged.prologue = Prologue::None;
  a.pro = prologue_args(staged);
  if (f.codes_in_blocks > 0) {
    if ((f.prologue != Prologue::None && !all_in) || !f.codes_act || !f.codes_meta ||
        int64_t(f.codes_in_blocks) * kBlock > f.w[0]->n_in) {
      fail(
          "cuda matmul q1_0 '{}': {} blocks of codes in need both code buffers, n_in >= {} and "
          "prologue none unless they are all of x ({} blocks)",
          f.w[0]->name, f.codes_in_blocks, int64_t(f.codes_in_blocks) * kBlock,
          f.w[0]->n_in / kBlock);
    }
    a.act_in = f.codes_act;
    a.meta_in = static_cast<const ActMeta*>(f.codes_meta);
    a.blocks_in = f.codes_in_blocks;
  }
  const Q1Cut cut = q1_cut(kQ, a.n_quads);
  a.slices = cut.slices;
  a.chunks = cut.chunks;
  return a;
}

// GemvCta's shared memory for a.slices * a.teams warps: sets the offsets, returns the bytes.
size_t gemv_layout(Q1GemvArgs& a) {
  size_t off = sizeof(float) * size_t(a.n_stage);
  a.off_act = static_cast<int>(off);
  off += size_t(a.n_blocks) * 32 * sizeof(uint32_t);
  a.off_meta = static_cast<int>(off);
  off += size_t(a.n_blocks) * sizeof(ActMeta);
  a.off_sums = static_cast<int>(off);
  off += sizeof(float) * size_t(a.pro.n_sums + a.pro.n_scales);
  off = (off + 15) / 16 * 16;
  a.off_red = static_cast<int>(off);
  off += sizeof(float) * 2 * 2 * size_t(a.slices * a.teams) * kTileRows;
  a.off_taps = static_cast<int>(off);
  if (a.epi.kind == Epilogue::ConvSilu)
    off += sizeof(float) * size_t(a.teams) * kTileRows * kConvTapFloats;
  if (a.fold_chunks > 0) {  // the chunks, their parts, the count of warps done
    off = (off + 15) / 16 * 16;
    a.off_fold = static_cast<int>(off);
    off += sizeof(uint4) * size_t(a.fold_chunks) +
           sizeof(float) * (size_t(a.fold_per * a.fold_ranges) + 1);
  }
  return off;
}

[[noreturn]] void fail_shape(const FusedGemv& f, const char* why, size_t smem) {
  const GpuMatrix& w = *f.w[0];
  fail("cuda matmul q1_0 '{}' [{} x {}]: the one-launch GEMV {} ({} bytes of shared memory)",
       w.name, w.n_out, w.n_in, why, smem);
}

// Teams per CTA: the fewest rounds of slots (one slot per team and round, one CTA per SM),
// then the most teams (more warps share the CTA's prologue and hide each other's latency).
// Four teams of 5 warps make two rounds of the qkv+z GEMV's 1024 row tiles (on the ~128 SMs
// its side launch leaves) and of q+k+v's 896 (on 132), where three teams need three
// (measured, H200: 9.92 -> 8.72 and 9.68 -> 8.12 µs). gate+up's 1088 pair slots take three
// rounds either way: three teams measured faster once (timeline, 2026-11-30: 14.22 against
// 14.59 µs), four since the kernel's instruction cuts (2026-12-01, gdn bench --timeline: 13.17
// against 12.38 µs, 3142.3 -> 3118.8 µs/token); fewer warps than that cost far more (capped
// at 10 or 12 warps, tg128 221 and 258 against 301). Its third round (32 pairs on 8 CTAs)
// split between team pairs, one team the gate tile and one the up tile (bit-identical): gate+up
// 14.94 -> 15.54 µs, tg128 338.3 -> 329.5 (H100, 2026-12-05). In gemv_lab it did shorten
// gate+up's tail (that round's 8 CTAs ended ~3 µs after the median CTA; with the split, 2 µs),
// but its ~52 instructions in the shared slot loop made every GEMV that never splits 1-9%
// slower, and the decode lost more than gate+up gained. The same round spread over 32 CTAs'
// last team instead (slots team-major, H100, 2026-12-06): tg128 −6% for every GEMV (a 16-byte
// spill), −2.8% for a pair's shared rounds alone (no spill, the dot loop moved; ffn_down, which
// runs none of it, 7.62 -> 8.29 µs). Behind a runtime switch, on and off in one binary, the
// pair's team-major round took 0.71 µs off gate+up (16.30 -> 15.60), but that binary's gate+up
// was 1.3 µs slower than main's with it off (ffn_down +0.4, the qkv steps -0.4), whether or
// not the switch's flag moved the other kernel parameters: tg128 351.2-352.8 against main's
// 353.7-356.3 in the same calls (H100, 2026-12-06). With the slot set after the prologue
// (GemvCta::team_major_shared_rounds), the loop's code stayed as it was: gate+up 14.97 -> 14.45 µs,
// tg128 354.4 -> 358.0 (H100, 2026-12-06).
int gemv_teams(int kQ, int slices, int n_slots, int n_sm) {
  const int cap = std::max(1, std::min(gemv_max_warps(kQ) / slices, 15));  // barriers 1..15
  int best = 1;
  int64_t best_rounds = 0;
  for (int t = 1; t <= cap; ++t) {
    const int64_t ctas = std::min<int64_t>(n_sm, ceil_div(n_slots, t));
    const int64_t rounds = ceil_div(n_slots, ctas * t);
    if (best_rounds == 0 || rounds <= best_rounds) {
      best = t;
      best_rounds = rounds;
    }
  }
  return best;
}

// Codes out: whole 128-row blocks of the output per CTA, each CTA the same number
// (the rest of the rows are shared as before), so that its teams' own slots are whole rounds;
// 0 where that cannot be.
int own_blocks(const Q1GemvArgs& a, unsigned grid) {
  if (a.epi.kind != Epilogue::SiluMulPair || a.n_out[0] % kBlock != 0 || a.teams >= kCodesBarrier) {
    return 0;
  }
  int own = std::min(a.n_out[0] / kBlock / static_cast<int>(grid), a.n_stage / kBlock);
  while (own > 0 && own * kTilesPerBlock % a.teams != 0) --own;
  return own;
}

// The folded rows' arguments (FusedGemv::fold_*; none without them).
void fold_args(const FusedGemv& f, Q1GemvArgs& a) {
  if (f.fold_n == 0) return;
  a.fold_chunks = static_cast<int>(f.fold_w[0]->n_col_tiles);
  const ChunkRanges r = chunk_ranges(a.fold_chunks);
  a.fold_ranges = r.n;
  a.fold_per = r.per;
  a.fold_div = FastDiv(static_cast<uint32_t>(r.per));
  int rows = 0;
  for (int i = 0; i < 2; ++i) {
    if (i < f.fold_n) {
      a.fold_codes[i] = f.fold_w[i]->codes.as<const uint4>();
      a.fold_y[i] = f.fold_y[i];
      rows += static_cast<int>(f.fold_w[i]->n_out);
    }
    a.fold_rows[i] = rows;
  }
}

// Why f's folded rows (f.fold_*) cannot be computed (empty: they can): first their operands
// (checked before the launch shape is built from them), then the launch g: its prologue must
// quantise x straight from memory, one eighth a thread (quantise_x's direct path, which holds
// each eighth's p(x) in registers), and every row needs a CTA.
std::string fold_operands_refusal(const FusedGemv& f) {
  if (f.fold_n < 1 || f.fold_n > 2) return fmt::format("{} matrices (1 or 2 fold)", f.fold_n);
  for (int i = 0; i < f.fold_n; ++i) {
    const GpuMatrix* w = f.fold_w[i];
    if (!w || !w->codes.get() || !f.fold_y[i]) {
      return fmt::format("matrix {} or its output missing", i);
    }
    if (w->type != quant::Type::BF16 || w->n_in != f.w[0]->n_in) {
      return fmt::format("'{}' is {} with n_in {} (BF16 of n_in {} fold)", w->name,
                         quant::type_info(w->type).name, w->n_in, f.w[0]->n_in);
    }
  }
  return "";
}
std::string fold_refusal(const FusedGemv& f, const GemvShape& g) {
  const Q1GemvArgs& a = g.a;
  const bool direct = a.blocks_in == 0 && direct_prologue(a.pro, 0, a.n_blocks, g.threads);
  if (!direct || a.fold_chunks > g.threads) {
    return fmt::format("the prologue ({}) does not quantise x an eighth a thread",
                       model::prologue_name(f.prologue));
  }
  if (a.fold_rows[1] > static_cast<int>(g.grid)) {
    return fmt::format("{} rows for {} CTAs", a.fold_rows[1], g.grid);
  }
  return "";
}

template <int kQ, bool kTraced = false>
GemvShape teams_shape(const FusedGemv& f) {
  GemvShape g;
  g.a = gemv_args<kQ>(f);
  Q1GemvArgs& a = g.a;
  fold_args(f, a);
  const int n_sm = usable_sms(f);
  a.teams = gemv_teams(kQ, a.slices, a.n_slots, n_sm);
  g.threads = 32 * a.slices * a.teams;
  g.smem = gemv_layout(a);
  const void* kernel = reinterpret_cast<const void*>(&q1_gemv_kernel<kQ, kTraced>);
  if (g.smem > allow_max_smem(kernel)) fail_shape(f, "does not fit", g.smem);
  const int per_sm = occupancy(kernel, g.threads, g.smem);
  if (per_sm < 1) fail_shape(f, "has no CTA that fits", g.smem);
  // As few CTAs as one round needs: ffn_down, ssm_out and attn_output (320 tiles, 3 teams) take
  // 107 SMs and leave 25 to the next kernel's early CTAs. On all 132 (2-3 teams each, slots
  // team-major) tg128 fell 2.8% (H100, 2026-12-06, same binary).
  g.grid = static_cast<unsigned>(
      std::min<int64_t>(int64_t(per_sm) * n_sm, ceil_div(a.n_slots, a.teams)));
  if (f.codes_out) {
    a.own_blocks = own_blocks(a, g.grid);
    if (a.own_blocks == 0 || !f.codes_act || !f.codes_meta)
      fail_shape(f, "cannot write codes out (SiluMulPair, whole blocks for every CTA)", g.smem);
    a.own_rounds = a.own_blocks * kTilesPerBlock / a.teams;
    a.act_out = f.codes_act;
    a.meta_out = static_cast<ActMeta*>(f.codes_meta);
  }
  return g;
}

template <int kQ, bool kTraced>
unsigned launch_gemv(const FusedGemv& f, const Q1Options& o, uint64_t* trace, cudaStream_t s) {
  const auto refuse = [&](const std::string& why, size_t smem) {
    if (!why.empty()) fail_shape(f, fmt::format("cannot fold rows in: {}", why).c_str(), smem);
  };
  if (f.fold_n > 0) refuse(fold_operands_refusal(f), 0);
  GemvShape g = teams_shape<kQ, kTraced>(f);
  if (f.fold_n > 0) refuse(fold_refusal(f, g), g.smem);
  g.a.trace = trace;
  launch(&q1_gemv_kernel<kQ, kTraced>, dim3(g.grid), dim3(g.threads), g.smem, o.pdl, s, g.a);
  return g.grid;
}
template <int kQ>
unsigned launch_gemv(const FusedGemv& f, const Q1Options& o, uint64_t* trace, cudaStream_t s) {
  if (f.fold_n > 0 && kQ != 2) fail_shape(f, "folds rows in only with two quads a chunk", 0);
  return trace ? launch_gemv<kQ, true>(f, o, trace, s) : launch_gemv<kQ, false>(f, o, trace, s);
}

unsigned run_gemv(const FusedGemv& f, const Q1Options& o, cudaStream_t s,
                  uint64_t* trace = nullptr) {
  unsigned grid = 0;
  switch (o.variant) {
    case Q1Variant::kBmma2:
      grid = launch_gemv<2>(f, o, trace, s);
      break;
    case Q1Variant::kBmma4:
      grid = launch_gemv<4>(f, o, trace, s);
      break;
    default:
      fail("cuda matmul q1_0 '{}': the one-launch GEMV exists for bmma-q2 and bmma-q4, not {}",
           f.w[0]->name, q1_variant_name(o.variant));
  }
  CUDA_CHECK_LAUNCH();
  return grid;
}

template <int kQ>
std::string describe_gemv(const FusedGemv& f) {
  const GemvShape g = teams_shape<kQ>(f);
  cudaFuncAttributes attr{};
  CUDA_CHECK(
      cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&q1_gemv_kernel<kQ, false>)));
  return fmt::format(
      "one launch: {} warps/tile x {} steps of {} quads, {} teams/CTA, {} CTAs x {} threads, "
      "{} regs, {} B shared",
      g.a.slices, g.a.chunks, kQ, g.a.teams, g.grid, g.threads, attr.numRegs, g.smem);
}

// Bits of word t of one stored block: bit i = weight 32t+i = the block's bytes 4t..4t+3.
uint32_t gather_word(const uint8_t* qs, int t) {
  uint32_t w;
  std::memcpy(&w, qs + 4 * t, sizeof w);  // little-endian: bit i of byte k is element 8k+i
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
    case Q1Variant::kImma:
      return "imma";
    case Q1Variant::kImmaPairs:
      return "imma-pairs";
  }
  return "?";
}

Q1Options q1_default_options(int64_t n_in, int64_t n_out, int64_t n_tokens) {
  // Two quads per warp; inputs too long for 18 warps of two quads take four. One token: the
  // one-launch kernel where it measured faster, the two-launch flat kernel for wide outputs.
  // Measured (H200, bench/gemv_lab, 2026-11-30, µs in a graph): one-launch / two-launch flat /
  // two-launch prefetch: 5120->6144 4.73 / 5.34 / 4.97, 6144->5120 4.80 / 5.63 / 5.34,
  // 17408->5120 11.17 / 11.82 / 13.28; but 5120->10240 7.48 / 6.91 / 7.79, 5120->17408
  // 9.40 / 8.90 / 10.07 and the 248320-row head 80.65 / 48.93 (87% of copy) / 58.81. The
  // variants share the cut and the per-block arithmetic, so all give the same bits.
  // Re-measured at b935524 after the one-launch kernel's instruction cuts (one-launch / flat):
  // 5120->6144 4.72 / 4.84, 5120->10240 6.05 / 5.90, and the two 17408 shapes now the other way
  // round: 5120->17408 7.79 / 8.29, 17408->5120 10.11 / 8.87 (one team of 17 warps per CTA, 2.4
  // slot rounds). Not switched yet: the rule wants a decode run on the GPU to confirm. (Since
  // cut_slices, 2026-12-01, 17408-long rows are 6 slices of 6 chunks: see there.)
  // Since the product kernel lets the next kernel start early (2026-12-04, 93bb199) the
  // two-launch path wins every measured two-quad shape (one-launch / two-launch prefetch):
  // 5120->6144 4.43 / 3.88, 6144->5120 4.72 / 3.85, 17408->5120 8.95 / 7.14; so matmul() runs
  // it there, and the one-launch GEMV is what matmul_fused runs (n_out 0). Four-quad shapes
  // (n_in > 18432) were not measured again and keep the one-launch rule.
  const bool wide = n_out >= 10000;
  const bool q2 = ceil_div(n_in, 512) <= 36;
  Q1Options o;
  if (imma_wins(n_out, n_tokens)) {
    o.variant = Q1Variant::kImma;
    return o;
  }
  o.variant = q2 ? (wide ? Q1Variant::kBmma2Flat : Q1Variant::kBmma2)
                 : (wide ? Q1Variant::kBmma4Flat : Q1Variant::kBmma4);
  o.one_launch = n_out == 0 || (!q2 && !wide);
  return o;
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
  const int n_in = static_cast<int>(w.n_in), n_blocks = static_cast<int>(geo.n_blocks_padded);
  const int vec = aligned16(x) && ldx % 4 == 0;
  const dim3 block(kQuantizeBlocks * 16);
  const auto kernel = uses_planes(v) ? &q1_quantize_kernel<true> : &q1_quantize_kernel<false>;
  // A token per grid row: batches longer than grid.y's limit in several launches.
  for (int64_t t0 = 0; t0 < n_tokens; t0 += detail::kMaxGridY) {
    const int64_t nt = std::min(n_tokens - t0, detail::kMaxGridY);
    const dim3 grid(ceil_div(geo.n_blocks_padded, kQuantizeBlocks), static_cast<unsigned>(nt));
    launch(kernel, grid, block, 0, true, s, x + t0 * ldx, ldx, n_in, n_blocks, vec,
           words + t0 * n_blocks * 32, meta + t0 * n_blocks);
    CUDA_CHECK_LAUNCH();
  }
}

void q1_0_product(const GpuMatrix& w, const void* act, float* y, int64_t ldy, int64_t n_tokens,
                  const Q1Options& o, cudaStream_t s) {
  if (!aligned16(act))
    fail("cuda matmul q1_0 '{}': activation scratch not 16-byte aligned", w.name);
  with_variant(o.variant, [&](auto l) { l.run(w, act, y, ldy, n_tokens, o.pdl, s); });
  CUDA_CHECK_LAUNCH();
}

std::string q1_0_describe(const GpuMatrix& w, int64_t n_tokens, const Q1Options& o) {
  if (n_tokens == 1 && o.one_launch) {
    const FusedGemv f = plain_gemv(w, nullptr, nullptr);
    return o.variant == Q1Variant::kBmma4 ? describe_gemv<4>(f) : describe_gemv<2>(f);
  }
  return with_variant(o.variant, [&](auto l) { return l.describe(w, n_tokens); });
}

void matmul_q1_0(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
                 int64_t n_tokens, MatmulWorkspace& ws, const Q1Options& o, cudaStream_t s) {
  check_matmul_args(w, x, ldx, y, ldy, n_tokens);
  if (n_tokens == 1 && o.one_launch) {
    run_gemv(plain_gemv(w, x, y), o, s);
    return;
  }
  void* act = ws.get(q1_0_workspace_bytes(w.n_in, n_tokens), s);
  q1_0_quantize(w, x, ldx, n_tokens, act, o.variant, s);
  q1_0_product(w, act, y, ldy, n_tokens, o, s);
}

void q1_0_two_launch_gemv(const GpuMatrix& w, const float* x, float* y, MatmulWorkspace& ws,
                          cudaStream_t s) {
  Q1Options o = q1_default_options(w.n_in, 0);
  o.one_launch = false;
  matmul_q1_0(w, x, w.n_in, y, w.n_out, 1, ws, o, s);
}

int64_t q1_0_imma_pairs_diff(const GpuMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
                             MatmulWorkspace& ws, cudaStream_t s) {
  const size_t n = static_cast<size_t>(n_tokens * w.n_out);
  std::vector<float> y[2];
  for (int v = 0; v < 2; ++v) {
    DeviceBuffer d(n * sizeof(float));
    // Two different poison patterns: a float neither variant writes differs too.
    CUDA_CHECK(cudaMemsetAsync(d.get(), v == 0 ? 0xff : 0xfe, d.bytes(), s));
    Q1Options o;
    o.variant = v == 0 ? Q1Variant::kImma : Q1Variant::kImmaPairs;
    matmul_q1_0(w, x, ldx, d.as<float>(), w.n_out, n_tokens, ws, o, s);
    y[v].resize(n);
    CUDA_CHECK(cudaMemcpyAsync(y[v].data(), d.get(), d.bytes(), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
  int64_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff += std::memcmp(&y[0][i], &y[1][i], sizeof(float)) != 0;
  return diff;
}

unsigned q1_0_gemv_traced(const FusedGemv& f, const Q1Options& o, uint64_t* trace, cudaStream_t s) {
  return run_gemv(f, o, s, trace);
}

std::string q1_0_trace_event(int e) {
  static const char* const kNames[] = {"entry",        "waited",    "summed",
                                       "sums barrier", "quantised", "prologue"};
  static const char* const kSlotNames[] = {"sums", "barrier", "stored"};
  static_assert(std::size(kNames) == kTraceSlots, "a name for every GemvTraceEvent");
  if (e < kTraceSlots) return kNames[e];
  if (e == kGemvTraceEvents - 1) return "exit";
  const int k = (e - kTraceSlots) / kTraceSlotEvents;
  return fmt::format("slot {} {}", k, kSlotNames[(e - kTraceSlots) % kTraceSlotEvents]);
}

unsigned matmul_fused_q1_0(const FusedGemv& f, const Q1Options& o, cudaStream_t s) {
  return run_gemv(f, o, s);
}

std::string fold_refusal_q1_0(const FusedGemv& f, const Q1Options& o) {
  if (o.variant != Q1Variant::kBmma2) {
    return fmt::format("the one-launch GEMV folds rows in with bmma-q2 only, not {}",
                       q1_variant_name(o.variant));
  }
  const std::string why = fold_operands_refusal(f);
  return why.empty() ? fold_refusal(f, teams_shape<2>(f)) : why;
}

int codes_out_blocks_q1_0(const FusedGemv& f, const Q1Options& o) {
  if (o.variant != Q1Variant::kBmma2 && o.variant != Q1Variant::kBmma4) return 0;
  const GemvShape g = o.variant == Q1Variant::kBmma2 ? teams_shape<2>(f) : teams_shape<4>(f);
  return own_blocks(g.a, g.grid) * static_cast<int>(g.grid);
}

// ---------------------------------------------------------------------------------------------
// Q1_0 on f32 activations (GpuMatrix::f32_activations; matrix.h says why it exists): the
// chunked kernel with one 16-byte chunk per block (its 128 sign bits, file order: bit k of byte
// i is element 8i + k) and the block's fp16 scale apart, as Q4_0's 18-byte blocks are stored.
// A sub-chunk of 16 weights is one half of a 32-bit word, widened to ±1.0f and FMA'd with the
// activations: one FMA per weight, about half the bandwidth (DESIGN.md §6) — a verification
// path, not a fast one.

namespace {

struct Q1F32Format {
  static constexpr int kElems = 128;
  static constexpr int kChunksPerBlock = 1;
  __device__ static void decode(const uint4& c, int sub, float (&w)[16]) {
    const uint32_t words[4] = {c.x, c.y, c.z, c.w};
    const uint32_t bits = words[sub >> 1] >> (16 * (sub & 1));
#pragma unroll
    for (int e = 0; e < 16; ++e) w[e] = (bits >> e) & 1u ? 1.0f : -1.0f;
  }
};

}  // namespace

GpuMatrix upload_q1_0_f32act(const model::Matrix& m, cudaStream_t s) {
  GpuMatrix w = upload_chunked(
      m, ChunkedFormat{kBlock, 1, &block_chunk<kBlockBytes, 1>, &block_scale<kBlockBytes>}, s);
  w.f32_activations = true;
  return w;
}

void matmul_q1_0_f32act(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
                        int64_t n_tokens, cudaStream_t s) {
  chunked_matmul<Q1F32Format>(w, x, ldx, y, ldy, n_tokens, s);
}

unsigned matmul_fused_q1_0_f32act(const FusedGemv& f, cudaStream_t s) {
  if (f.codes_out || f.codes_in_blocks > 0) {
    fail("cuda matmul_fused q1_0 (f32 activations): no codes in or out");
  }
  return chunked_fused<Q1F32Format>(f, s);
}

}  // namespace gdn::cuda::mm
