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
// so 2048 weights cost the warp ~13 instructions: ~0.2 thread-instructions per weight, a fifth
// of the budget. Lanes t = 0..3 of a row are summed once per row tile by two shuffles.
//
// Variant dp4a (no tensor cores; kept in the lab as the fallback): the same weight layout with
// the codes rearranged so that (w >> k) & 0x01010101 selects four weights whose codes sit in one
// int8x4 word: SHF + LOP + DP4A per 4 weights per row, ~0.8 thread-instructions per weight.
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
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/parallel.h"
#include "cuda/matmul.cuh"
#include "quant/quant.h"

namespace gdn::cuda::mm {
namespace {

constexpr int kBlock = 128;       // Q1_0 block = the b1 mma's k
constexpr int kBlockBytes = 18;   // fp16 d + 16 bytes of bits (file layout)
constexpr int kTileRows = 16;     // the mma's m
constexpr int kQuadBlocks = 4;    // blocks per quad (one 16-byte scale load per lane)
constexpr int kMaxSlices = 18;    // warps per row tile: n_in <= 18 * kQ * 512
constexpr int kMaxThreads = kMaxSlices * 32;
constexpr int kBatchTokensQ1 = 8;  // tokens per pass of the batched kernel

struct alignas(8) ActMeta {
  float d;  // activation scale of the block
  int sum;  // sum of its codes
};

struct Q1Args {
  const uint4* bits;     // [n_tiles][n_quads][2][32]
  const uint4* scales;   // [n_tiles][n_quads][8]
  const uint32_t* act;   // [n_tokens][n_quads * 4][32]
  const ActMeta* meta;   // [n_tokens][n_quads * 4]
  float* y;              // [n_tokens][ldy]
  int64_t ldy;
  int n_out, n_tiles, n_quads, n_tokens;
  int slices;  // warps per row tile
  int rpc;     // row tiles per CTA
};

__device__ __forceinline__ ActMeta load_meta(const ActMeta* p) {
  const int2 v = __ldg(reinterpret_cast<const int2*>(p));
  return ActMeta{__int_as_float(v.x), v.y};
}

// ---------------------------------------------------------------------------------------------
// Per-block arithmetic: the integer dot of one block for rows g and g+8, this lane's share.

struct BmmaMath {
  int w0, w1;  // 2 * plane weight of this lane's two D columns (planes 2t, 2t+1)
  __device__ explicit BmmaMath(int lane) {
    const int t = lane & 3;
    w0 = 2 << (2 * t);
    w1 = t == 3 ? -256 : 2 << (2 * t + 1);
  }
  __device__ __forceinline__ void block(uint32_t a_lo, uint32_t a_hi, const uint32_t* act,
                                        int lane, int neg_sum, int& i_lo, int& i_hi) const {
    const uint32_t b = __ldg(act + lane);
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
  __device__ __forceinline__ void block(uint32_t a_lo, uint32_t a_hi, const uint32_t* act,
                                        int lane, int neg_sum, int& i_lo, int& i_hi) const {
    const uint4* q = reinterpret_cast<const uint4*>(act + (lane & 3) * 8);
    const uint4 q0 = __ldg(q), q1 = __ldg(q + 1);
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

template <int kQ>
struct TileLoads {
  uint4 bits[kQ][2];
  uint4 scales[kQ];
};

template <int kQ>
__device__ __forceinline__ void load_tile(const Q1Args& a, int tile, int q_begin, int q_count,
                                          int lane, TileLoads<kQ>& t) {
#pragma unroll
  for (int i = 0; i < kQ; ++i) {
    if (i < q_count && tile < a.n_tiles) {
      const int64_t quad = int64_t(tile) * a.n_quads + q_begin + i;
      t.bits[i][0] = ld_stream(a.bits + (quad * 2) * 32 + lane);
      t.bits[i][1] = ld_stream(a.bits + (quad * 2 + 1) * 32 + lane);
      t.scales[i] = ld_stream(a.scales + quad * 8 + (lane >> 2));
    }
  }
}

template <class Math, int kQ, int NT>
__device__ __forceinline__ void compute_tile(const Q1Args& a, const Math& m,
                                             const TileLoads<kQ>& t, int q_begin, int q_count,
                                             int tok0, int lane, float (&acc)[NT][2]) {
  const int n_blocks = a.n_quads * kQuadBlocks;
#pragma unroll
  for (int n = 0; n < NT; ++n) acc[n][0] = acc[n][1] = 0.0f;
#pragma unroll
  for (int i = 0; i < kQ; ++i) {
    if (i >= q_count) break;
    const uint32_t words[8] = {t.bits[i][0].x, t.bits[i][0].y, t.bits[i][0].z, t.bits[i][0].w,
                               t.bits[i][1].x, t.bits[i][1].y, t.bits[i][1].z, t.bits[i][1].w};
    const uint32_t halves[4] = {t.scales[i].x, t.scales[i].y, t.scales[i].z, t.scales[i].w};
#pragma unroll
    for (int j = 0; j < kQuadBlocks; ++j) {
      const int blk = (q_begin + i) * kQuadBlocks + j;
      __half2 h;
      std::memcpy(&h, &halves[j], sizeof h);
      const float2 dw = __half22float2(h);  // rows g, g+8
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        if (NT > 1 && tok0 + n >= a.n_tokens) break;
        const int64_t tb = int64_t(tok0 + n) * n_blocks + blk;
        const ActMeta meta = load_meta(a.meta + tb);
        const int neg_sum = (lane & 3) == 0 ? -meta.sum : 0;
        int i_lo, i_hi;
        m.block(words[2 * j], words[2 * j + 1], a.act + tb * 32, lane, neg_sum, i_lo, i_hi);
        acc[n][0] = fmaf(static_cast<float>(i_lo), dw.x * meta.d, acc[n][0]);
        acc[n][1] = fmaf(static_cast<float>(i_hi), dw.y * meta.d, acc[n][1]);
      }
    }
  }
}

// Sums the lanes t of each row, then the slices of each row tile in slice order; stores y.
template <int NT>
__device__ __forceinline__ void reduce_store(const Q1Args& a, float* red, int tile0, int tok0,
                                             int lane, int warp, float (&acc)[NT][2]) {
  const int slice = warp % a.slices, tile_local = warp / a.slices;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float v = acc[n][h];
      v += __shfl_xor_sync(kFullMask, v, 1);
      v += __shfl_xor_sync(kFullMask, v, 2);
      if ((lane & 3) == 0) {
        red[((tile_local * a.slices + slice) * NT + n) * kTileRows + (lane >> 2) + 8 * h] = v;
      }
    }
  }
  __syncthreads();  // all slices' partial sums are in shared memory before they are added
  for (int i = threadIdx.x; i < a.rpc * NT * kTileRows; i += blockDim.x) {
    const int tl = i / (NT * kTileRows), n = i / kTileRows % NT, r = i % kTileRows;
    const int row = (tile0 + tl) * kTileRows + r, tok = tok0 + n;
    if (row >= a.n_out || tok >= a.n_tokens) continue;
    float sum = 0.0f;
    for (int s = 0; s < a.slices; ++s) sum += red[((tl * a.slices + s) * NT + n) * kTileRows + r];
    a.y[int64_t(tok) * a.ldy + row] = sum;
  }
  __syncthreads();  // the sums are read before the next row tile overwrites them
}

// grid (CTAs striding over groups of rpc row tiles, ceil(n_tokens / NT)), block 32 * slices *
// rpc, dynamic shared memory rpc * slices * NT * 16 floats.
template <class Math, int kQ, int NT>
__global__ void __launch_bounds__(kMaxThreads) q1_kernel(Q1Args a) {
  extern __shared__ float red[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int slice = warp % a.slices, tile_local = warp / a.slices;
  const int q_begin = slice * kQ, q_count = min(kQ, a.n_quads - q_begin);
  const int tok0 = blockIdx.y * NT;
  const int n_groups = (a.n_tiles + a.rpc - 1) / a.rpc;
  const Math m(lane);
  float acc[NT][2];

  // Two tiles' loads in flight: compute one while the next arrives (unrolled by two so the
  // buffers stay in registers without copies).
  TileLoads<kQ> buf0, buf1;
  int group = blockIdx.x;
  load_tile<kQ>(a, group * a.rpc + tile_local, q_begin, q_count, lane, buf0);
  pdl_wait();  // the activations come from the quantise kernel; the weights did not
  while (group < n_groups) {
    const int next = group + gridDim.x;
    if (next < n_groups) load_tile<kQ>(a, next * a.rpc + tile_local, q_begin, q_count, lane, buf1);
    compute_tile<Math, kQ, NT>(a, m, buf0, q_begin, q_count, tok0, lane, acc);
    reduce_store<NT>(a, red, group * a.rpc, tok0, lane, warp, acc);
    group = next;
    if (group >= n_groups) break;
    const int after = group + gridDim.x;
    if (after < n_groups) load_tile<kQ>(a, after * a.rpc + tile_local, q_begin, q_count, lane, buf0);
    compute_tile<Math, kQ, NT>(a, m, buf1, q_begin, q_count, tok0, lane, acc);
    reduce_store<NT>(a, red, group * a.rpc, tok0, lane, warp, acc);
    group = after;
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
      word |= static_cast<uint32_t>(static_cast<uint8_t>(codes[warp][32 * b + 4 * k + t])) << (8 * b);
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

template <class Math, int kQ, int NT>
void launch_q1(const GpuMatrix& w, const void* act, float* y, int64_t ldy, int64_t n_tokens,
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
  a.slices = static_cast<int>(ceil_div(geo.n_quads, kQ));
  if (a.slices > kMaxSlices) {
    fail("cuda matmul q1_0 '{}': n_in {} needs {} warps per row tile, more than {}", w.name, w.n_in,
         a.slices, kMaxSlices);
  }
  a.rpc = std::max(1, 8 / a.slices);  // about 8 warps per CTA
  const int threads = 32 * a.slices * a.rpc;
  const size_t smem = sizeof(float) * a.rpc * a.slices * NT * kTileRows;
  auto* kernel = &q1_kernel<Math, kQ, NT>;
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  if (per_sm < 1) fail("cuda matmul q1_0 '{}': {} threads do not fit an SM", w.name, threads);
  const int64_t groups = ceil_div(a.n_tiles, a.rpc);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(groups, int64_t(per_sm) * sm_count())),
                  static_cast<unsigned>(ceil_div(n_tokens, NT)));
  launch(kernel, grid, dim3(threads), smem, pdl, s, a);
}

template <class Math, int kQ>
void launch_q1_tokens(const GpuMatrix& w, const void* act, float* y, int64_t ldy,
                      int64_t n_tokens, bool pdl, cudaStream_t s) {
  if (n_tokens == 1) {
    launch_q1<Math, kQ, 1>(w, act, y, ldy, n_tokens, pdl, s);
  } else {
    launch_q1<Math, kQ, kBatchTokensQ1>(w, act, y, ldy, n_tokens, pdl, s);
  }
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
    case Q1Variant::kBmma4:
      return "bmma-q4";
    case Q1Variant::kDp4a2:
      return "dp4a-q2";
  }
  return "?";
}

GpuMatrix upload_q1_0(const MatrixView& m, cudaStream_t s) {
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
            uint32_t* out = &bits[static_cast<size_t>((((tile * geo.n_quads + quad) * 2 + pair) *
                                                       32 + lane) * 4)];
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
            const uint8_t* b = block_ptr(tile * kTileRows + g + 8 * (v & 1), quad * kQuadBlocks + v / 2);
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
  CUDA_CHECK(cudaMemcpyAsync(w.codes.get(), bits.data(), w.codes.bytes(), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(
      cudaMemcpyAsync(w.scales.get(), scales.data(), w.scales.bytes(), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaStreamSynchronize(s));  // the host staging vectors die here
  return w;
}

size_t q1_0_workspace_bytes(int64_t n_in, int64_t n_tokens) {
  const Geometry geo = geometry(n_in);
  return static_cast<size_t>(n_tokens * geo.n_blocks_padded) * (32 * sizeof(uint32_t) + sizeof(ActMeta));
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
  if (!aligned16(act)) fail("cuda matmul q1_0 '{}': activation scratch not 16-byte aligned", w.name);
  switch (o.variant) {
    case Q1Variant::kBmma2:
      launch_q1_tokens<BmmaMath, 2>(w, act, y, ldy, n_tokens, o.pdl, s);
      break;
    case Q1Variant::kBmma4:
      launch_q1_tokens<BmmaMath, 4>(w, act, y, ldy, n_tokens, o.pdl, s);
      break;
    case Q1Variant::kDp4a2:
      launch_q1_tokens<Dp4aMath, 2>(w, act, y, ldy, n_tokens, o.pdl, s);
      break;
  }
  CUDA_CHECK_LAUNCH();
}

void matmul_q1_0(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
                 int64_t n_tokens, MatmulWorkspace& ws, const Q1Options& o, cudaStream_t s) {
  check_matmul_args(w, x, ldx, y, ldy, n_tokens);
  void* act = ws.get(q1_0_workspace_bytes(w.n_in, n_tokens), s);
  q1_0_quantize(w, x, ldx, n_tokens, act, o.variant, s);
  q1_0_product(w, act, y, ldy, n_tokens, o, s);
}

}  // namespace gdn::cuda::mm
