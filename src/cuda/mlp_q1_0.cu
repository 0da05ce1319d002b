// The fused Q1_0 MLP of one token: y <- y + W_down·(silu(W_gate·n) ⊙ (W_up·n)), n the RMS norm
// of y, as ONE kernel split along the MLP's inner dimension (split-K for W_down).
//
// Why: the decode runs this as two launches (gate+up with its norm prologue and SwiGLU
// epilogue, then ffn_down adding into y), ~20.8 µs a layer for 37.5 MB of weights (~9 µs at
// copy bandwidth, H200). Each launch pays its dependent chain after the wait (stage and
// quantise x, dots, slice sums, stores); ffn_down's starts only once every gate+up row exists.
// Here a CTA owns whole 128-row blocks b of the inner dimension: it computes the gate and up
// rows of its block (so the block's SwiGLU values, and their activation codes, never leave
// the SM), then the block's contribution to every output row, P_b = W_down[:, b]·h_b, into a
// global buffer. One grid barrier later each CTA adds the partials of its share of y. The
// weights stream from entry to the end with no GPU-wide wait between gate+up and down.
//
// Arithmetic. n, its codes and the gate and up rows are the one-launch GEMV's, bit for bit
// (prologue_scales / prologue_stage / quantise_staged; dot_chunk, sum_quad_lanes and the q1_cut
// slice order per row), so h is the decode's gate+up output and its codes the codes hand-off's.
// The down product's order is new: per output row, P_b = sum_quad_lanes(block_fma(block b))
// and y + sum_b P_b, summed from 0 in block order. (The decode's ffn_down sums slices of 24
// blocks: a different float order, equal within rounding.)
//
// Shared memory: the 8 gate and 8 up row tiles of the current block, bulk-copied at entry
// (before the wait: weights never depend on the previous kernel) on one mbarrier per matrix | n
// staged | its codes | the norm's sums and scales | the 16 tiles' row sums | the block's codes
// | the mbarriers. After the barrier the tiles' room holds the partials being added.
//
// Measured (H200, 2026-12-03, bench/mlp_lab, five calls; bench/RESULTS.md): REFUTED as built.
// µs a layer, launches / this kernel (best version and copy mode): n_ff 16896 (132 blocks, one
// per SM) 19.7-20.0 / 22.2; Bonsai's 17408 (136 blocks: four CTAs own two, in turn) 21.9-22.1 /
// 29.4. The gate+up part (wait, norm, stage, quantise, rows, codes: ~12-14 µs) is no faster
// than the gate+up launch: the norm's loads of y queue behind the CTA's 184 KB of bulk copies
// (norm 2.6 µs held, 6-7 µs not), and held, the rows wait for the bytes to land (~5.4 µs at full
// bandwidth). And the split-K tail costs more than the ffn_down launch it replaces: down
// products 3.3-4.6 µs (20 tiles a warp, one block each), the grid barrier 2.1-2.8, the partials'
// one L2 round trip 2.3, their sums 0.8 (~9 µs against ~7). Every GPU-wide dependence costs ~2 µs
// and each round trip after it ~2 more, whether it is a kernel boundary or a grid barrier.
#include <fmt/format.h>

#include "common/error.h"
#include "cuda/async_copy.cuh"
#include "cuda/q1_dot.cuh"
#include "cuda/q1_mlp.h"

namespace gdn::cuda::mm {
namespace {

constexpr int kQ = 2;                               // quads per chunk, as the decode's GEMVs
constexpr int kTilesPerBlock = kBlock / kTileRows;  // row tiles of one matrix in a 128-row block
constexpr int kMlpWarps = 2 * kTilesPerBlock;       // a warp per gate or up tile of the block
constexpr int kMlpThreads = 32 * kMlpWarps;
constexpr int kAddBatch = 12;  // partials a thread has in flight
constexpr int kSumBatch = 16;  // partials of a row loaded before they are added

struct MlpArgs {
  const uint4* gate_bits;  // [tiles][quads][2][32] (matmul_q1_0.cu's layout)
  const uint4* gate_scales;
  const uint4* up_bits;
  const uint4* up_scales;
  const uint2* down_bits;       // [n_blk][out_tiles][32]: rows g, g+8, word t of block b
  const uint32_t* down_scales;  // [n_blk][out_tiles][8]: fp16 d of rows g, g+8
  float* partials;              // [n_blk][n_embd]
  float* y;
  float* h;           // optional [n_blk * 128]
  unsigned* barrier;  // {arrivals, generation}
  Q1MlpCopies copies;
  uint64_t* trace;  // optional [grid][kMlpTraceEvents]
  int n_embd, n_quads, n_blocks_x, n_stage, out_tiles, n_blk, slices, chunks;
  int tile_bytes;  // one gate or up row tile: bits then scales
  int off_stage, off_act, off_meta, off_sums, off_rows, off_hact, off_bar;
  PrologueArgs pro;
};

__device__ __forceinline__ void mlp_stamp(const MlpArgs& a, int e) {
  if (a.trace == nullptr || threadIdx.x != 0) return;
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  a.trace[blockIdx.x * kMlpTraceEvents + e] = t;
}

// Thread 0: block b's 8 row tiles of matrices [m0, m1) (0 gate, 1 up; consecutive in the
// layout: one copy of bits and one of scales per matrix) into the tiles' room: gate bits | gate
// scales | up bits | up scales, matrix m on mbarrier m.
__device__ void issue_gate_up(const MlpArgs& a, int b, unsigned char* tiles, uint64_t* bar, int m0,
                              int m1) {
  const unsigned bits_bytes = unsigned(a.n_quads) * 1024u * kTilesPerBlock;
  const unsigned scale_bytes = unsigned(a.n_quads) * 128u * kTilesPerBlock;
  const int64_t tile0 = int64_t(b) * kTilesPerBlock;
  for (int m = m0; m < m1; ++m) {
    unsigned char* dst = tiles + m * (bits_bytes + scale_bytes);
    mbar_arrive_expect_tx(bar + m, bits_bytes + scale_bytes);
    bulk_copy(dst, (m ? a.up_bits : a.gate_bits) + tile0 * a.n_quads * 64, bits_bytes, bar + m);
    bulk_copy(dst + bits_bytes, (m ? a.up_scales : a.gate_scales) + tile0 * a.n_quads * 8,
              scale_bytes, bar + m);
  }
}

// Rows g, g+8 of one gate or up tile in shared memory against n's codes: per slice dot_chunk
// over its chunks, sum_quad_lanes, then the slices added in order from 0 (the GEMVs' sum_slices).
__device__ float2 tile_rows(const MlpArgs& a, const uint4* tile_bits, const uint4* tile_scales,
                            const uint32_t* act, const ActMeta* meta, const BmmaMath& math,
                            int lane) {
  const uint4* bits = tile_bits + lane;
  const uint4* scales = tile_scales + (lane >> 2);
  float2 sum = make_float2(0.0f, 0.0f);
  for (int s = 0; s < a.slices; ++s) {
    float2 acc = make_float2(0.0f, 0.0f);
    for (int c = 0; c < a.chunks; ++c) {
      const int q0 = (s * a.chunks + c) * kQ, quads = a.n_quads - q0;
      ChunkLoads<kQ> t;
      load_quads<kQ, true>(bits + q0 * 64, scales + q0 * 8, quads, t);
      const float2 p = dot_chunk<BmmaMath, kQ, true>(
          math, act + q0 * kQuadBlocks * 32 + BmmaMath::lane_offset(lane), meta + q0 * kQuadBlocks,
          t, quads, lane);
      acc.x += p.x;
      acc.y += p.y;
    }
    const float2 r = sum_quad_lanes(acc);
    sum.x += r.x;
    sum.y += r.y;
  }
  return sum;
}

// Thread 0: block b's column of W_down (every output tile's 16 x 128 bits and scales, one
// stretch in the split-K layout) into the tiles' room, on mbarrier 2.
__device__ void issue_down(const MlpArgs& a, int b, unsigned char* tiles, uint64_t* bar) {
  const unsigned bits_bytes = unsigned(a.out_tiles) * 256u,
                 scale_bytes = unsigned(a.out_tiles) * 32u;
  mbar_arrive_expect_tx(bar + 2, bits_bytes + scale_bytes);
  bulk_copy(tiles, a.down_bits + int64_t(b) * a.out_tiles * 32, bits_bytes, bar + 2);
  bulk_copy(tiles + bits_bytes, a.down_scales + int64_t(b) * a.out_tiles * 8, scale_bytes, bar + 2);
}

// Block b's down partials P_b[row] for this warp's output tiles, from the block's codes and its
// W_down column in shared memory (issue_down).
__device__ void down_partials(const MlpArgs& a, int b, const unsigned char* tiles,
                              const uint32_t* hact, const ActMeta* hmeta, const BmmaMath& math,
                              int lane, int warp) {
  const uint2* bits = reinterpret_cast<const uint2*>(tiles) + lane;
  const uint32_t* scales =
      reinterpret_cast<const uint32_t*>(tiles + a.out_tiles * 256) + (lane >> 2);
  float* out = a.partials + int64_t(b) * a.n_embd + (lane >> 2);
#pragma unroll 4
  for (int t = warp; t < a.out_tiles; t += kMlpWarps) {
    const uint2 w = bits[t * 32];
    const float2 p =
        block_fma<BmmaMath, true>(math, w.x, w.y, scales[t * 8], hact + BmmaMath::lane_offset(lane),
                                  hmeta, lane, make_float2(0.0f, 0.0f));
    const float2 r = sum_quad_lanes(p);
    if ((lane & 3) == 0) {
      out[t * kTileRows] = r.x;
      out[t * kTileRows + 8] = r.y;
    }
  }
}

// Every CTA has arrived (their partials visible GPU-wide) before any thread of this one goes on.
// Sense-reversing: the last arrival resets the count and advances the generation, so the next
// launch needs no reset. All CTAs are resident: one per SM, grid <= SMs (Q1Mlp).
__device__ void grid_barrier(unsigned* bar) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned gen = ld_acquire(bar + 1);
    // acq_rel: this CTA's partials (ordered before by the CTA barrier) are released with the
    // arrival, and the last arrival acquires every other CTA's.
    unsigned arrived;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                 : "=r"(arrived)
                 : "l"(bar)
                 : "memory");
    if (arrived == gridDim.x - 1) {
      bar[0] = 0;
      asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(bar + 1), "r"(gen + 1) : "memory");
    } else {
      while (ld_acquire(bar + 1) == gen) {
      }
    }
  }
  __syncthreads();
}

// This CTA's rows of y: y + the partials of every block, added in block order from 0.
__device__ void add_partials(const MlpArgs& a, float* red) {
  const int per = (a.n_embd + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  const int r0 = static_cast<int>(blockIdx.x) * per;
  const int nr = max(0, min(a.n_embd, r0 + per) - r0);
  // Every load of a thread in flight before its stores: one round trip to L2 per batch.
  const int total = a.n_blk * nr;
  for (int i0 = threadIdx.x; i0 < total; i0 += kAddBatch * kMlpThreads) {
    float v[kAddBatch];
#pragma unroll
    for (int k = 0; k < kAddBatch; ++k) {
      const int i = i0 + k * kMlpThreads, b = i / max(nr, 1);
      if (i < total) v[k] = __ldcg(a.partials + int64_t(b) * a.n_embd + r0 + (i - b * nr));
    }
#pragma unroll
    for (int k = 0; k < kAddBatch; ++k) {
      if (i0 + k * kMlpThreads < total) red[i0 + k * kMlpThreads] = v[k];
    }
  }
  __syncthreads();
  mlp_stamp(a, kMlpLoaded);
  if (static_cast<int>(threadIdx.x) < nr) {
    // Block order from 0; each batch's shared-memory loads issued before its additions.
    const float* col = red + threadIdx.x;
    float sum = 0.0f;
    int b = 0;
    for (; b + kSumBatch <= a.n_blk; b += kSumBatch) {
      float v[kSumBatch];
#pragma unroll
      for (int k = 0; k < kSumBatch; ++k) v[k] = col[(b + k) * nr];
#pragma unroll
      for (int k = 0; k < kSumBatch; ++k) sum += v[k];
    }
    for (; b < a.n_blk; ++b) sum += col[b * nr];
    float* y = a.y + r0 + threadIdx.x;
    *y = *y + sum;  // the AddInto epilogue's `y + x`
  }
}

__global__ void __launch_bounds__(kMlpThreads, 1) q1_mlp_kernel(const __grid_constant__ MlpArgs a) {
  extern __shared__ float4 smem4[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(smem4);
  float4* stage = reinterpret_cast<float4*>(smem + a.off_stage);
  uint32_t* act = reinterpret_cast<uint32_t*>(smem + a.off_act);
  ActMeta* meta = reinterpret_cast<ActMeta*>(smem + a.off_meta);
  float* sums = reinterpret_cast<float*>(smem + a.off_sums);
  float* rows = reinterpret_cast<float*>(smem + a.off_rows);
  uint32_t* hact = reinterpret_cast<uint32_t*>(smem + a.off_hact);
  ActMeta* hmeta = reinterpret_cast<ActMeta*>(hact + 32);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + a.off_bar);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  mlp_stamp(a, kMlpEntry);
  if (tid == 0) {
    for (int m = 0; m < 3; ++m) mbar_init(bar + m, 1);  // gate, up, down
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();  // the mbarriers are initialised before the copies complete on them
  if (tid == 0) {
    if (a.copies != Q1MlpCopies::Held) {
      issue_gate_up(a, blockIdx.x, smem, bar, 0, a.copies == Q1MlpCopies::Split ? 1 : 2);
    }
    for (int b = blockIdx.x; b < a.n_blk; b += gridDim.x) {
      prefetch_l2(a.down_bits + int64_t(b) * a.out_tiles * 32, unsigned(a.out_tiles) * 256u);
      prefetch_l2(a.down_scales + int64_t(b) * a.out_tiles * 8, unsigned(a.out_tiles) * 32u);
    }
  }
  mlp_stamp(a, kMlpIssued);
  prologue_prefetch_constants(a.pro);
  pdl_launch_dependents();
  pdl_wait();  // y comes from earlier kernels
  mlp_stamp(a, kMlpWaited);
  prologue_prefetch_inputs(a.pro);
  prologue_scales(a.pro, sums, sums + a.pro.n_sums);
  mlp_stamp(a, kMlpNormed);
  if (a.copies == Q1MlpCopies::Split && tid == 0) issue_gate_up(a, blockIdx.x, smem, bar, 1, 2);
  prologue_stage(a.pro, a.n_stage, sums + a.pro.n_sums,
                 [&](int f, float4 v) { stage[stage_pos(f)] = v; });
  __syncthreads();  // n is staged before any eighth reads it
  mlp_stamp(a, kMlpStaged);
  if (a.copies == Q1MlpCopies::Held && tid == 0) issue_gate_up(a, blockIdx.x, smem, bar, 0, 2);
  quantise_staged(stage, act, meta, 0, a.n_blocks_x, tid, kMlpThreads);
  __syncthreads();  // its codes are complete before any dot reads them
  mlp_stamp(a, kMlpQuantised);

  const BmmaMath math(lane);
  int round = 0;
  for (int b = blockIdx.x; b < a.n_blk; b += gridDim.x, ++round) {
    const int m = warp / kTilesPerBlock, tile = warp % kTilesPerBlock;
    const unsigned char* mat = smem + m * kTilesPerBlock * a.tile_bytes;
    mbar_wait(bar + m, round & 1);
    const float2 r =
        tile_rows(a, reinterpret_cast<const uint4*>(mat) + tile * a.n_quads * 64,
                  reinterpret_cast<const uint4*>(mat + kTilesPerBlock * a.n_quads * 1024) +
                      tile * a.n_quads * 8,
                  act, meta, math, lane);
    if ((lane & 3) == 0) {
      rows[warp * kTileRows + (lane >> 2)] = r.x;
      rows[warp * kTileRows + (lane >> 2) + 8] = r.y;
    }
    __syncthreads();  // every gate and up row is summed; the tiles' room is free
    if (round == 0) mlp_stamp(a, kMlpGateUp);
    if (tid == 0) issue_down(a, b, smem, bar);
    if (tid < kBlock) {  // the SiluMulPair epilogue's `up * silu(gate)`, staged as the codes want
      const float h = rows[kBlock + tid] * detail::silu(rows[tid]);
      reinterpret_cast<float*>(stage)[4 * stage_pos(tid >> 2) + (tid & 3)] = h;
      if (a.h != nullptr) a.h[int64_t(b) * kBlock + tid] = h;
    }
    __syncthreads();  // the block's values are staged
    if (warp == 0) quantise_eighths_at<1>(stage, hact, hmeta, 0, 32, 16, lane);
    __syncthreads();  // the block's codes are complete
    if (round == 0) mlp_stamp(a, kMlpCodes);
    mbar_wait(bar + 2, round & 1);
    down_partials(a, b, smem, hact, hmeta, math, lane, warp);
    __syncthreads();  // the codes and the column are read before the next block's overwrite them
    if (tid == 0 && b + static_cast<int>(gridDim.x) < a.n_blk) {
      issue_gate_up(a, b + gridDim.x, smem, bar, 0, 2);
    }
  }
  mlp_stamp(a, kMlpDown);
  grid_barrier(a.barrier);
  mlp_stamp(a, kMlpBarrier);
  add_partials(a, reinterpret_cast<float*>(smem));
  mlp_stamp(a, kMlpDone);
}

// W_down's standard tiles (matmul_q1_0.cu's layout) regrouped by block: one thread per (block,
// output tile, lane).
__global__ void repack_down_kernel(const uint4* bits, const uint4* scales, uint2* dbits,
                                   uint32_t* dscales, int n_quads, int out_tiles, int n_blk) {
  const int64_t n = int64_t(n_blk) * out_tiles * 32;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int lane = static_cast<int>(i & 31);
    const int64_t bt = i >> 5;
    const int t = static_cast<int>(bt % out_tiles), b = static_cast<int>(bt / out_tiles);
    const int q = b / kQuadBlocks, j = b % kQuadBlocks;
    const uint4 w = bits[(int64_t(t) * n_quads + q) * 64 + (j >> 1) * 32 + lane];
    dbits[i] = (j & 1) ? make_uint2(w.z, w.w) : make_uint2(w.x, w.y);
    if (lane < 8) {
      const uint4 s = scales[(int64_t(t) * n_quads + q) * 8 + lane];
      const uint32_t v[4] = {s.x, s.y, s.z, s.w};
      dscales[bt * 8 + lane] = v[j];
    }
  }
}

int align16(int bytes) {
  return (bytes + 15) / 16 * 16;
}

// n = rms_norm(y) as the gate+up GEMV's prologue: the same PrologueArgs, so the same floats.
FusedGemv norm_prologue(const Q1MlpArgs& a) {
  FusedGemv f;
  f.prologue = Prologue::RmsNorm;
  f.x = a.y;
  f.norm = a.norm;
  f.eps = a.eps;
  f.n = 1;
  f.w[0] = a.gate;
  return f;
}

}  // namespace

Q1Mlp::Q1Mlp(const Q1MlpArgs& a, cudaStream_t s) : a_(a) {
  if (a.gate == nullptr || a.up == nullptr || a.down == nullptr || a.norm == nullptr ||
      a.y == nullptr) {
    fail("cuda fused mlp: gate, up, down, norm and y are required");
  }
  for (const GpuMatrix* w : {a.gate, a.up, a.down}) {
    if (w->type != quant::Type::Q1_0 || w->f32_activations) {
      fail("cuda fused mlp: {} is {}{}, needs Q1_0 with quantised activations", w->name,
           quant::type_info(w->type).name, w->f32_activations ? " (f32 activations)" : "");
    }
  }
  const int64_t n_embd = a.gate->n_in, n_ff = a.gate->n_out;
  if (a.up->n_in != n_embd || a.up->n_out != n_ff || a.down->n_in != n_ff ||
      a.down->n_out != n_embd) {
    fail("cuda fused mlp: shapes do not chain: gate {}x{}, up {}x{}, down {}x{}", a.gate->n_out,
         a.gate->n_in, a.up->n_out, a.up->n_in, a.down->n_out, a.down->n_in);
  }
  if (n_ff % kBlock != 0 || n_embd % kTileRows != 0) {
    fail("cuda fused mlp: needs n_ff % 128 == 0 and n_embd % 16 == 0, got n_ff {} n_embd {}", n_ff,
         n_embd);
  }
  if (reinterpret_cast<uintptr_t>(a.y) % 16 != 0 || reinterpret_cast<uintptr_t>(a.norm) % 16 != 0) {
    fail("cuda fused mlp: y and norm must be 16-byte aligned");
  }
  n_blk_ = static_cast<int>(n_ff / kBlock);
  const int out_tiles = static_cast<int>(n_embd / kTileRows);
  const int64_t n_quads = a.gate->n_col_tiles, down_quads = a.down->n_col_tiles;
  grid_ = static_cast<unsigned>(std::min(n_blk_, sm_count()));
  down_bits_ = DeviceBuffer(size_t(n_blk_) * out_tiles * 32 * sizeof(uint2));
  down_scales_ = DeviceBuffer(size_t(n_blk_) * out_tiles * 8 * sizeof(uint32_t));
  partials_ = DeviceBuffer(size_t(n_blk_) * size_t(n_embd) * sizeof(float));
  barrier_ = DeviceBuffer(2 * sizeof(unsigned));
  CUDA_CHECK(cudaMemsetAsync(barrier_.get(), 0, barrier_.bytes(), s));
  repack_down_kernel<<<1024, 256, 0, s>>>(
      a.down->codes.as<const uint4>(), a.down->scales.as<const uint4>(), down_bits_.as<uint2>(),
      down_scales_.as<uint32_t>(), static_cast<int>(down_quads), out_tiles, n_blk_);
  CUDA_CHECK_LAUNCH();
  const PrologueArgs pro = prologue_args(norm_prologue(a));
  const int tile_bytes = static_cast<int>(n_quads) * 1152;
  const int n_blocks_x = static_cast<int>(n_quads) * kQuadBlocks;
  int off = kMlpWarps * tile_bytes;
  const auto take = [&](int bytes) {
    const int at = off;
    off += align16(bytes);
    return at;
  };
  const int off_stage = take(n_blocks_x * kBlock * 4), off_act = take(n_blocks_x * 128),
            off_meta = take(n_blocks_x * 8), off_sums = take((pro.n_sums + pro.n_scales) * 4),
            off_rows = take(2 * kBlock * 4), off_hact = take(32 * 4 + 8), off_bar = take(3 * 8);
  smem_ = size_t(off);
  const size_t max_smem = allow_max_smem(reinterpret_cast<const void*>(&q1_mlp_kernel));
  const size_t red_bytes = size_t(n_blk_) * size_t((n_embd + grid_ - 1) / grid_) * 4;
  const size_t down_bytes = size_t(out_tiles) * 288;
  if (smem_ > max_smem || std::max(red_bytes, down_bytes) > size_t(kMlpWarps) * tile_bytes) {
    fail("cuda fused mlp: {} bytes of shared memory for n_embd {} n_ff {} (the device allows {})",
         std::max({smem_, red_bytes, down_bytes}), n_embd, n_ff, max_smem);
  }
  offsets_[0] = off_stage;
  offsets_[1] = off_act;
  offsets_[2] = off_meta;
  offsets_[3] = off_sums;
  offsets_[4] = off_rows;
  offsets_[5] = off_hact;
  offsets_[6] = off_bar;
}

void Q1Mlp::run(cudaStream_t s, uint64_t* trace) const {
  MlpArgs m{};
  m.gate_bits = a_.gate->codes.as<const uint4>();
  m.gate_scales = a_.gate->scales.as<const uint4>();
  m.up_bits = a_.up->codes.as<const uint4>();
  m.up_scales = a_.up->scales.as<const uint4>();
  m.down_bits = down_bits_.as<const uint2>();
  m.down_scales = down_scales_.as<const uint32_t>();
  m.partials = partials_.as<float>();
  m.y = a_.y;
  m.h = a_.h;
  m.barrier = barrier_.as<unsigned>();
  m.copies = a_.copies;
  m.trace = trace;
  m.n_embd = static_cast<int>(a_.gate->n_in);
  m.n_quads = static_cast<int>(a_.gate->n_col_tiles);
  m.n_blocks_x = m.n_quads * kQuadBlocks;
  m.n_stage = m.n_blocks_x * kBlock;
  m.out_tiles = m.n_embd / kTileRows;
  m.n_blk = n_blk_;
  const Q1Cut cut = q1_cut(kQ, m.n_quads);
  m.slices = cut.slices;
  m.chunks = cut.chunks;
  m.tile_bytes = m.n_quads * 1152;
  m.off_stage = offsets_[0];
  m.off_act = offsets_[1];
  m.off_meta = offsets_[2];
  m.off_sums = offsets_[3];
  m.off_rows = offsets_[4];
  m.off_hact = offsets_[5];
  m.off_bar = offsets_[6];
  m.pro = prologue_args(norm_prologue(a_));
  launch(&q1_mlp_kernel, dim3(grid_), dim3(kMlpThreads), smem_, true, s, m);
  CUDA_CHECK_LAUNCH();
}

std::string Q1Mlp::describe() const {
  return fmt::format("fused mlp {} -> {} -> {}: {} CTAs x {} threads, {} KB shared, {} blocks{}",
                     a_.gate->n_in, a_.gate->n_out, a_.down->n_out, grid_, kMlpThreads,
                     smem_ / 1024, n_blk_,
                     a_.copies == Q1MlpCopies::Held ? ", gate and up copies held until n is staged"
                     : a_.copies == Q1MlpCopies::Split ? ", up copies held until the norm's scale"
                                                       : "");
}

}  // namespace gdn::cuda::mm
