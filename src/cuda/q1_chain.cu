// The persistent GEMV chain (bench/chain_lab): plain one-token Q1_0 GEMVs, each step's x
// written by an earlier step, run as ONE cooperative kernel with a grid barrier per step. The
// question it answers: does a kernel that streams the weights of later steps while the current
// one finishes (DESIGN.md §4's megakernel) take back what a per-layer GEMV spends beyond its
// bytes? Every launch of the decode pays ~1-3 µs before its first byte arrives and then the
// dependent chain after its wait; here the bytes stream continuously and only the chain stays.
//
// Each CTA (one per SM) holds kChainWarps consumer warps and one producer warp:
//   producer (one thread): walks every step's row tiles that this CTA owns (tile t of a step
//     belongs to CTA t mod grid) and bulk-copies each tile's bits and scales (cp.async.bulk)
//     into a ring of shared memory, one mbarrier ("full") per ring entry. It never waits on
//     activations, only on ring space: an entry's bytes are reused once its team has released
//     it ("empty" mbarrier), so it runs up to a ring ahead of the consumers, across steps.
//   consumers: per step, wait until every CTA has finished the step before (a release/acquire
//     counter), stage x and quantise it (the one-launch GEMV's device code on the same floats:
//     quantize_eighths, stage_pos), then teams of `slices` warps take the CTA's tiles in order,
//     each waiting only for its own tile's mbarrier, with dot_chunk / sum_quad_lanes /
//     sum_slices in the one-launch GEMV's order. So every y is bit-identical to matmul_fused's
//     plain GEMV (gdn ops' q1_0_chain and the lab check it).
// Options (Q1ChainOptions): x quantised straight from L2 (no staged copy, so the ring gets its
// 68 KB); the step's end signalled by red.release; stream-only (timing: no dependences); a warp
// per tile; the producer held from the CTA's last tile of a step until the next x is quantised.
//
// Measured (H200, 2026-12-03, bench/chain_lab, the GDN layer's four plain GEMVs 64 times,
// bench/RESULTS.md): launches 7.99-8.02 µs a step; this chain 8.39-8.82 with x staged,
// 7.34-10.77 with x from L2 (three calls), 4.79-5.15 stream-only (62-67% of copy; 6.29 while the
// producer still did a 64-bit division per tile), 4.56 stream-only with a warp per tile (70%).
// So streaming ahead works once the producer is lean, but the dependent chain per step does
// not shrink: the prologue (1.5-3.6 µs, 3.6-6.4 for ffn_down's 17408 floats, which every CTA
// reads and quantises in full, its round trips queued behind its SM's bulk copies) and tiles
// that take ~1.3 µs each on a team of 5 warps even with their bytes landed long before.
// Later (2026-12-03, three calls): 15 consumer warps instead of 18 (no spill), and the producer
// held while x is read (Q1ChainOptions::hold_producer): x from L2 with warp tiles 8.10-8.64 ->
// 7.33-7.51 µs a step against launches 7.99-8.02 (6-8% faster). The prologue still takes
// 1.5 µs (3.8 for ffn_down) and a warp's 16 x 5120 tile 2.6 µs; ncu (held, warp tiles): 20% of
// the consumers' stall samples wait at the grid barrier, 15% at the step's end barrier for the
// CTA's slowest warp. Refuted: the next chunk's weights loaded before the current chunk's dots
// (slower, 10.2 µs: it spilled), and (tile, slice) items over all warps (7.46: no faster).
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cuda/act_quantize.cuh"
#include "cuda/async_copy.cuh"
#include "cuda/matmul.cuh"
#include "cuda/q1_chain.h"
#include "cuda/q1_dot.cuh"
#include "quant/types.h"

namespace gdn::cuda::mm {

namespace {

// Consumer warps: 15 + the producer = 512 threads, so that ptxas may give each 128 registers
// (at 18, 608 threads, it had 96 and spilled 144 bytes; 15 do not spill).
constexpr int kChainWarps = 15;
constexpr int kChainThreads = 32 * (kChainWarps + 1);  // + the producer warp
constexpr int kChainEntries = 32;                      // ring entries per CTA
constexpr int kChainBarrier = 15;  // the consumers' named barrier (teams use 1..kChainMaxTeams)
constexpr int kChainMaxTeams = 14;

struct ChainStep {
  const uint4* bits;
  const uint4* scales;
  const float* x;
  float* y;
  int n_in, n_out, n_quads, n_tiles, slices, chunks;
};

struct ChainArgs {
  const ChainStep* steps;
  int n_steps;
  unsigned* arrivals;  // CTAs that finished a step, summed over steps (zero at launch)
  int ring_bytes;      // the ring at offset 0 of the dynamic shared memory
  int off_stage, off_act, off_meta, off_red, off_bar;
  bool direct_x, release_add, stream_only, warp_tiles, hold_producer;  // Q1ChainOptions
  uint64_t* trace;  // [step][cta][kChainTraceEvents] globaltimer stamps, or null
};

struct ChainRing {
  unsigned char* bytes;
  uint64_t* full;    // [kChainEntries]
  uint64_t* empty;   // [kChainEntries]
  int* offset;       // [kChainEntries] the entry's byte offset in the ring
  int* tag;          // [kChainEntries] the tile sequence number the entry holds (-1: none yet)
  long long* start;  // [kChainEntries] its position in the producer's unbounded byte count
  int* hold;         // Q1ChainOptions::hold_producer: nonzero while the producer must not issue

  __device__ explicit ChainRing(unsigned char* smem, int off_bar)
      : bytes(smem),
        full(reinterpret_cast<uint64_t*>(smem + off_bar)),
        empty(full + kChainEntries),
        offset(reinterpret_cast<int*>(empty + kChainEntries)),
        tag(offset + kChainEntries),
        start(reinterpret_cast<long long*>(tag + kChainEntries)),
        hold(reinterpret_cast<int*>(start + kChainEntries)) {}

  // Waits until entry e holds tile q and its bytes have landed. A team takes every teams-th
  // tile, so it may reach tile q before the entry's previous tile (q - kChainEntries) has
  // landed, when the mbarrier's parity would already read as q's phase complete: the tag,
  // written before the producer re-arms the entry (which it does only after that tile was
  // released), says the entry is in q's phase.
  __device__ void wait_full(int q) const {
    const int e = q % kChainEntries;
    while (*static_cast<volatile int*>(tag + e) != q) {
    }
    mbar_wait(full + e, (q / kChainEntries) & 1);
  }
};

__device__ __forceinline__ void chain_stamp(const ChainArgs& a, int step, int e) {
  if (a.trace == nullptr) return;
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  a.trace[(int64_t(step) * gridDim.x + blockIdx.x) * kChainTraceEvents + e] = t;
}

// The CTA's row tiles of step st: t = blockIdx.x + i * gridDim.x.
__device__ __forceinline__ int chain_tiles(const ChainStep& st) {
  return st.n_tiles > static_cast<int>(blockIdx.x)
             ? (st.n_tiles - 1 - static_cast<int>(blockIdx.x)) / static_cast<int>(gridDim.x) + 1
             : 0;
}

// The producer (one thread): every tile of every step, in the consumers' order, as soon as the
// ring has room. Entries are placed at increasing positions of an unbounded byte count (an
// entry never straddles the ring's end) and released in any order; the producer reclaims them
// oldest first, so a region is free once every older entry has been released.
__device__ void chain_produce(const ChainArgs& a, const ChainRing& r) {
  const int ring = a.ring_bytes;
  long long pos = 0;  // where the next entry starts in the unbounded count
  int head = 0;       // the same in the ring (pos mod ring, kept without 64-bit divisions)
  int seq = 0, oldest = 0;
  for (int s = 0; s < a.n_steps; ++s) {
    const ChainStep st = a.steps[s];
    const int bits_bytes = st.n_quads * 1024, bytes = bits_bytes + st.n_quads * 128;
    const int tiles = chain_tiles(st);
    for (int i = 0; i < tiles; ++i, ++seq) {
      const int tile = static_cast<int>(blockIdx.x) + i * static_cast<int>(gridDim.x);
      if (head + bytes > ring) {  // no entry straddles the ring's end: skip to its start
        pos += ring - head;
        head = 0;
      }
      while (oldest < seq && (seq - oldest >= kChainEntries ||
                              pos + bytes > r.start[oldest % kChainEntries] + ring)) {
        mbar_wait(r.empty + oldest % kChainEntries, (oldest / kChainEntries) & 1);
        ++oldest;
      }
      while (*static_cast<volatile int*>(r.hold) != 0) {
      }
      const int e = seq % kChainEntries;
      r.start[e] = pos;
      r.offset[e] = head;
      *static_cast<volatile int*>(r.tag + e) = seq;
      unsigned char* dst = r.bytes + head;
      mbar_arrive_expect_tx(r.full + e, unsigned(bytes));
      bulk_copy(dst, st.bits + int64_t(tile) * st.n_quads * 64, unsigned(bits_bytes), r.full + e);
      bulk_copy(dst + bits_bytes, st.scales + int64_t(tile) * st.n_quads * 8,
                unsigned(st.n_quads) * 128u, r.full + e);
      pos += bytes;
      head += bytes;
    }
    chain_stamp(a, s, kChainIssuedAll);
  }
}

// x of step st (n_in floats, zero-padded to the quads) staged at stage_pos, every load of a
// thread issued before its stores; then every eighth quantised into act / meta.
__device__ void chain_prologue(const ChainStep& st, float4* stage, uint32_t* act, ActMeta* meta,
                               int lane, int warp) {
  constexpr int kThreads = 32 * kChainWarps, kBatch = 8;
  const int tid = threadIdx.x;
  const int n4 = st.n_quads * 128, valid4 = st.n_in / 4;
  const float4* x4 = reinterpret_cast<const float4*>(st.x);
  for (int base = 0; base < n4; base += kBatch * kThreads) {
    float4 v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int i = base + k * kThreads + tid;
      v[k] = i < valid4 ? __ldcg(x4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int i = base + k * kThreads + tid;
      if (i < n4) stage[stage_pos(i)] = v[k];
    }
  }
  bar_sync(kChainBarrier, kThreads);  // x is staged before any eighth reads it
  const int n_eighths = st.n_quads * kQuadBlocks * 16;
  for (int u0 = warp * 32; u0 < n_eighths; u0 += kThreads) {
    const int u[1] = {u0 + lane}, uc[1] = {min(u0 + lane, n_eighths - 1)};
    uint32_t words[1][2];
    float d[1];
    int sum[1];
    quantize_eighths<true, 1>(stage, uc, lane, words, d, sum);
    if (u[0] < n_eighths) store_eighth(act, meta, u[0], words[0], d[0], sum[0]);
  }
  bar_sync(kChainBarrier, kThreads);  // act / meta are complete before any dot reads them
}

// Q1ChainOptions::direct_x: each thread loads its eighths' floats straight from global memory
// (L2), all of them before any is quantised (one round trip), then quantises them two at a time
// (quantize_eighths_from: the same codes as from the staged copy). Eighth k of a thread is
// warp * 32 + lane + k * threads: whole warps, a block's sixteen eighths on aligned lanes.
__device__ void chain_quantise_direct(const ChainStep& st, uint32_t* act, ActMeta* meta, int lane,
                                      int warp) {
  constexpr int kThreads = 32 * kChainWarps;
  constexpr int kMaxEighths = (max_slices(2) * 2 * 512 / 8 + kThreads - 1) / kThreads;  // 5
  const int n_eighths = st.n_quads * kQuadBlocks * 16, valid8 = st.n_in / 8;
  const float4* x4 = reinterpret_cast<const float4*>(st.x);
  const int u0 = warp * 32 + lane;
  float v[kMaxEighths][8];
#pragma unroll
  for (int k = 0; k < kMaxEighths; ++k) {
    const int u = u0 + k * kThreads;
    float4 f0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), f1 = f0;
    if (u < valid8) {
      f0 = __ldcg(x4 + 2 * u);
      f1 = __ldcg(x4 + 2 * u + 1);
    }
    const float e8[8] = {f0.x, f0.y, f0.z, f0.w, f1.x, f1.y, f1.z, f1.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) v[k][e] = e8[e];
  }
  // Eighths k, k + 1, ... of this thread, already loaded.
  const auto from_regs = [&](int k) {
    return [&v, k](int n, float(&e8)[8]) {
#pragma unroll
      for (int e = 0; e < 8; ++e) e8[e] = v[k + n][e];
    };
  };
#pragma unroll
  for (int k = 0; k < kMaxEighths; k += 2) {
    const int w0 = warp * 32 + k * kThreads;  // the warp's first eighth of the pair
    if (w0 >= n_eighths) break;
    if (w0 + kThreads < n_eighths) {
      uint32_t words[2][2];
      float d[2];
      int sum[2];
      quantize_eighths_from<true, 2>(from_regs(k), lane, words, d, sum);
      for (int n = 0; n < 2; ++n) {
        const int u = u0 + (k + n) * kThreads;
        if (u < n_eighths) store_eighth(act, meta, u, words[n], d[n], sum[n]);
      }
    } else {
      uint32_t words[1][2];
      float d[1];
      int sum[1];
      quantize_eighths_from<true, 1>(from_regs(k), lane, words, d, sum);
      if (u0 + k * kThreads < n_eighths)
        store_eighth(act, meta, u0 + k * kThreads, words[0], d[0], sum[0]);
    }
  }
  bar_sync(kChainBarrier, kThreads);  // act / meta are complete before any dot reads them
}

// Slice `slice` of a tile whose bytes are in the ring at `bits`: its chunks' dots added in
// order, then the four lanes of each row summed (sum_quad_lanes): the one-launch GEMV's
// per-warp value for rows g and g + 8.
template <int kQ>
__device__ __forceinline__ float2 chain_slice(const ChainStep& st, const uint4* bits,
                                              const uint32_t* act, const ActMeta* meta,
                                              const BmmaMath& math, int slice, int lane) {
  const uint4* scales = bits + st.n_quads * 64;
  const int q_begin = slice * st.chunks * kQ;
  const int quads = max(0, min(st.chunks * kQ, st.n_quads - q_begin));
  float2 acc = make_float2(0.0f, 0.0f);
  for (int c = 0; c < st.chunks; ++c) {
    const int q0 = q_begin + c * kQ;
    ChunkLoads<kQ> t;
    load_quads<kQ, true>(bits + q0 * 64 + lane, scales + q0 * 8 + (lane >> 2), quads - c * kQ, t);
    const float2 p = dot_chunk<BmmaMath, kQ, true>(
        math, act + q0 * kQuadBlocks * 32 + BmmaMath::lane_offset(lane), meta + q0 * kQuadBlocks, t,
        quads - c * kQ, lane);
    acc.x += p.x;
    acc.y += p.y;
  }
  return sum_quad_lanes(acc);
}

template <int kQ>
__device__ void chain_consume(const ChainArgs& a, const ChainRing& r, unsigned char* smem) {
  constexpr int kThreads = 32 * kChainWarps;
  float4* stage = reinterpret_cast<float4*>(smem + a.off_stage);
  uint32_t* act = reinterpret_cast<uint32_t*>(smem + a.off_act);
  ActMeta* meta = reinterpret_cast<ActMeta*>(smem + a.off_meta);
  float* red = reinterpret_cast<float*>(smem + a.off_red);  // [2 parities][warps][16]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const BmmaMath math(lane);
  int seq = 0;
  for (int s = 0; s < a.n_steps; ++s) {
    const ChainStep st = a.steps[s];
    if (s > 0 && threadIdx.x == 0 && !a.stream_only) {
      const unsigned target = unsigned(s) * gridDim.x;
      while (ld_acquire(a.arrivals) < target) {
      }
    }
    // Orders every thread after thread 0's acquire, and the step before's dots (which read
    // act / meta) before this step's prologue overwrites them.
    bar_sync(kChainBarrier, kThreads);
    if (threadIdx.x == 0) chain_stamp(a, s, kChainWaited);
    if (a.direct_x && !a.stream_only) {
      chain_quantise_direct(st, act, meta, lane, warp);
    } else if (!a.stream_only) {
      chain_prologue(st, stage, act, meta, lane, warp);
    }
    if (threadIdx.x == 0) {
      *static_cast<volatile int*>(r.hold) = 0;  // x is read: the producer may issue again
      chain_stamp(a, s, kChainQuantised);
    }
    // Teams of `slices` warps, at most one per named barrier (ids 1..14; 16 exist).
    const int teams = min(kChainWarps / st.slices, kChainMaxTeams);
    const int team = warp / st.slices, slice = warp % st.slices;
    const int tiles = chain_tiles(st);
    // Teams are formed anew each step (slices differ): every warp starts on the same parity.
    // The barrier before the prologue ordered the last step's sums read before any is written.
    int parity = 0;
    const auto tile_row = [&](int i, int r) {
      return (static_cast<int>(blockIdx.x) + i * static_cast<int>(gridDim.x)) * kTileRows + r;
    };
    if (a.warp_tiles && tiles >= kChainWarps / 3) {
      // A warp per tile: its slices one after another, added in slice order as sum_slices
      // does (the same sums in the same order), with no team barrier.
      for (int i = warp; i < tiles; i += kChainWarps) {
        const int q = seq + i;
        r.wait_full(q);
        const uint4* bits = reinterpret_cast<const uint4*>(r.bytes + r.offset[q % kChainEntries]);
        float2 sum = make_float2(0.0f, 0.0f);
        for (int k = 0; k < st.slices; ++k) {
          const float2 v = chain_slice<kQ>(st, bits, act, meta, math, k, lane);
          sum.x += v.x;
          sum.y += v.y;
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(r.empty + q % kChainEntries);
        if ((lane & 3) == 0) {
          const int row = tile_row(i, lane >> 2);
          if (row < st.n_out) st.y[row] = sum.x;
          if (row + 8 < st.n_out) st.y[row + 8] = sum.y;
        }
      }
    } else if (team < teams) {
      const int r16 = static_cast<int>(threadIdx.x) - team * st.slices * 32;
      for (int i = team; i < tiles; i += teams) {
        const int q = seq + i, e = q % kChainEntries;
        r.wait_full(q);
        const uint4* bits = reinterpret_cast<const uint4*>(r.bytes + r.offset[e]);
        const float2 sums = chain_slice<kQ>(st, bits, act, meta, math, slice, lane);
        if ((lane & 3) == 0) {
          float* slot = red + (parity * kChainWarps + warp) * kTileRows + (lane >> 2);
          slot[0] = sums.x;
          slot[8] = sums.y;
        }
        // The team's slice sums are in shared memory and its warps are done with the entry.
        bar_sync(1 + team, 32 * st.slices);
        if (r16 == 0) mbar_arrive(r.empty + e);
        if (r16 < kTileRows && tile_row(i, r16) < st.n_out) {
          st.y[tile_row(i, r16)] =
              sum_slices(red + (parity * kChainWarps + team * st.slices) * kTileRows + r16,
                         st.slices, kTileRows);
        }
        parity ^= 1;
      }
    }
    seq += tiles;
    if (threadIdx.x == 0) chain_stamp(a, s, kChainDots);
    bar_sync(kChainBarrier, kThreads);  // every y of this CTA is stored
    if (threadIdx.x == 0) {
      // Held from here until the next step's x is quantised.
      if (a.hold_producer) *static_cast<volatile int*>(r.hold) = 1;
      if (a.release_add) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(a.arrivals) : "memory");
      } else {
        __threadfence();
        atomicAdd(a.arrivals, 1u);
      }
      chain_stamp(a, s, kChainDone);
    }
  }
}

template <int kQ>
__global__ void __launch_bounds__(kChainThreads, 1)
    q1_chain_kernel(const __grid_constant__ ChainArgs a) {
  extern __shared__ float4 smem4[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(smem4);
  const ChainRing r(smem, a.off_bar);
  if (threadIdx.x == 0) {
    for (int e = 0; e < kChainEntries; ++e) {
      mbar_init(r.full + e, 1);
      mbar_init(r.empty + e, 1);
      r.tag[e] = -1;
    }
    *r.hold = a.hold_producer ? 1 : 0;  // held until the first step's x is quantised
    fence_mbar_init_cluster();
  }
  __syncthreads();  // the barriers are initialised before anyone uses them
  if (threadIdx.x >= 32 * kChainWarps) {
    if (threadIdx.x == 32 * kChainWarps) chain_produce(a, r);
    return;
  }
  chain_consume<kQ>(a, r, smem);
}

size_t align128(size_t n) {
  return (n + 127) / 128 * 128;
}

}  // namespace

struct Q1Chain::Impl {
  DeviceBuffer table, arrivals;
  ChainArgs args{};
  unsigned grid = 0;
  size_t smem = 0;
};

Q1Chain::Q1Chain(const std::vector<Q1ChainStep>& steps, const Q1ChainOptions& o)
    : impl_(std::make_unique<Impl>()) {
  if (steps.empty()) fail("cuda q1_0 chain: no steps");
  std::vector<ChainStep> table;
  int max_quads = 0;
  unsigned max_tile_bytes = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    const GpuMatrix& w = *steps[k].w;
    if (w.type != quant::Type::Q1_0 || w.f32_activations) {
      fail("cuda q1_0 chain: step {} matrix '{}' is {}, not Q1_0 on quantised activations", k,
           w.name, quant::type_info(w.type).name);
    }
    const int n_quads = static_cast<int>(w.n_col_tiles);
    if (n_quads > max_slices(2) * 2) {
      fail("cuda q1_0 chain: step {} matrix '{}' has n_in {} > {}", k, w.name, w.n_in,
           max_slices(2) * 2 * 512);
    }
    if (!aligned16(steps[k].x)) fail("cuda q1_0 chain: step {} x is not 16-byte aligned", k);
    const Q1Cut cut = q1_cut(2, n_quads);
    table.push_back(ChainStep{w.codes.as<uint4>(), w.scales.as<uint4>(), steps[k].x, steps[k].y,
                              static_cast<int>(w.n_in), static_cast<int>(w.n_out), n_quads,
                              static_cast<int>(w.n_row_tiles), cut.slices, cut.chunks});
    max_quads = std::max(max_quads, n_quads);
    max_tile_bytes = std::max(max_tile_bytes, unsigned(n_quads) * 1152u);
  }
  Impl& m = *impl_;
  ChainArgs& a = m.args;
  a.n_steps = static_cast<int>(table.size());
  const void* kernel = reinterpret_cast<const void*>(&q1_chain_kernel<2>);
  const size_t max_smem = allow_max_smem(kernel);
  a.direct_x = o.direct_x;
  a.release_add = o.release_add;
  a.stream_only = o.stream_only;
  a.warp_tiles = o.warp_tiles;
  a.hold_producer = o.hold_producer;
  // Shared memory: the ring, then (in this order) staged x (none when direct_x), act, meta,
  // slice sums, the ring's barriers and bookkeeping.
  const size_t parts[] = {
      o.direct_x ? 0 : align128(size_t(max_quads) * 512 * sizeof(float)),
      align128(size_t(max_quads) * kQuadBlocks * 128),
      align128(size_t(max_quads) * kQuadBlocks * sizeof(ActMeta)),
      align128(2 * kChainWarps * kTileRows * sizeof(float)),
      kChainEntries * (2 * sizeof(uint64_t) + 2 * sizeof(int) + sizeof(long long)) + sizeof(int)};
  size_t rest = 0;
  for (size_t p : parts) rest += p;
  if (rest + max_tile_bytes > max_smem) {
    fail("cuda q1_0 chain: {} B of shared memory besides the ring leave no room for a {} B tile",
         rest, max_tile_bytes);
  }
  a.ring_bytes = static_cast<int>((max_smem - rest) / 128 * 128);
  int* offsets[] = {&a.off_stage, &a.off_act, &a.off_meta, &a.off_red, &a.off_bar};
  size_t off = size_t(a.ring_bytes);
  for (size_t i = 0; i < std::size(parts); ++i) {
    *offsets[i] = static_cast<int>(off);
    off += parts[i];
  }
  m.smem = off;
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kChainThreads, m.smem));
  if (per_sm < 1) fail("cuda q1_0 chain: no CTA of {} B shared memory fits an SM", m.smem);
  m.grid = static_cast<unsigned>(sm_count());
  m.table = DeviceBuffer(table.size() * sizeof(ChainStep));
  CUDA_CHECK(cudaMemcpy(m.table.get(), table.data(), m.table.bytes(), cudaMemcpyHostToDevice));
  m.arrivals = DeviceBuffer(sizeof(unsigned));
  a.steps = m.table.as<ChainStep>();
  a.arrivals = m.arrivals.as<unsigned>();
}

Q1Chain::~Q1Chain() = default;

void Q1Chain::run(cudaStream_t s, uint64_t* trace) const {
  ChainArgs a = impl_->args;
  a.trace = trace;
  CUDA_CHECK(cudaMemsetAsync(a.arrivals, 0, sizeof(unsigned), s));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(impl_->grid);
  cfg.blockDim = dim3(kChainThreads);
  cfg.dynamicSmemBytes = impl_->smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;  // every CTA resident: the grid barrier needs it
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, &q1_chain_kernel<2>, a));
}

unsigned Q1Chain::grid() const {
  return impl_->grid;
}

std::string Q1Chain::describe() const {
  const ChainArgs& a = impl_->args;
  return fmt::format(
      "{} CTAs x {} threads ({} consumer warps + a producer), {} B shared, ring {} B, x {}, "
      "signal {}{}{}",
      impl_->grid, kChainThreads, kChainWarps, impl_->smem, a.ring_bytes,
      a.direct_x ? "quantised from L2" : "staged", a.release_add ? "red.release" : "fence+atomic",
      a.warp_tiles ? ", a warp per tile where a step has tiles for a third of the warps" : "",
      a.hold_producer ? ", producer held while x is read" : "");
}

}  // namespace gdn::cuda::mm
