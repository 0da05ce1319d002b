// The attention layer's position-dependent kernels: rope (NeoX, in place) and causal GQA softmax
// attention against the slot's KV cache (decode, T = 1, and prefill, T > 1), which for one
// token can first do the layer's split, q/k head norms, rope and KV store (the fused prep).
//
// rope — one thread per (row, head, pair), grid-striding. Each thread computes its angle
// pos·θ^(−2i/n_rot) in double (rope_angle) — pos up to ~10^5 needs more than f32 (an f32
// angle near 10^5 rad is off by up to 4e-3 rad), and the CPU computes it in double too — and
// rotates its pair (x_i, x_{i+n_rot/2}) in double, rounding once (rope_rotate). The angle is
// recomputed per head rather than shared through a table: that costs double-precision
// instructions the GPU has to spare but needs no barrier, and the pair's loads overlap it.
// CUDA's double pow/sin/cos are within 2 ulp, so the results match the CPU's to the last f32
// bit except where a double rounds across an f32 boundary (1 ulp). Measured (H200,
// 2026-11-30, gdn ops --perf, before the rotation's products were pinned unfused): Bonsai q at
// T = 1, 2.05 µs (75% of the same-size read ceiling) against 2.6 µs with a shared table
// between two barriers.
//
// attention — one cluster of S CTAs per (query row t, head h), 8 warps per CTA. The
// n_kv = pos0 + t + 1 keys are dealt to the cluster's 8·S warps in batches of 4 consecutive
// keys (global warp w takes keys 4w.., 4w + 32S.., …), and each warp runs its own online
// softmax (running max m, sum l, accumulator o over the head dim spread across its lanes, D/32
// per lane) with no barrier in the key loop. Per batch a lane loads its D/32 dims of the 4 K
// rows and 4 V rows up front (coalesced: lanes read consecutive floats of a row), forms the 4
// dot products with warp butterflies, then rescales and accumulates. Merging, in fixed order
// (deterministic): each CTA merges its 8 warps' (m, l, o) through shared memory after one
// barrier and sends its merged partial into the cluster's first CTA (st.async into Hopper
// distributed shared memory — no global workspace, no second launch), whose mbarrier counts
// the bytes (S = 1: a plain store and a CTA barrier); that CTA merges the S partials in rank
// order and writes out = o / l. No cluster barrier but the entry's: cluster.sync() compiles to
// a GPU-scope membar, which waited for the prep's stores, and every CTA waited there, twice,
// for the slowest one (ncu, H100, 2026-12-06: the two barriers held ~41% of the stall samples
// of a decode launch, S = 8).
// Measured so (same call, gdn bench --timeline at position 17): the attention step 8.31 ->
// 6.99 µs, attn_output after it 5.48 -> 5.14; tg128 353.6 / 353.2 -> 357.6 / 357.0.
// In decode S is sized by the context's bound, so most CTAs get no key; letting those send the
// empty partial and exit at once (no prep, no wait) was slower: attention 7.01 -> 7.44 µs,
// attn_output 5.19 -> 5.56, q+k+v before them 8.51 -> 8.93, tg128 -0.3% (H100, 2026-12-06).
// Reading, not tested: held at their wait they kept the SMs from the next GEMV's CTAs, which
// otherwise start early and prefetch their weights while q+k+v still streams its own.
//
// S (1, 2, 4 or 8, the portable cluster limit) is this flash-decoding split: decode has only H
// (t, h) pairs (24 for Bonsai), so S grows until the grid has two CTAs per SM, as long as each
// CTA keeps at least 128 keys; prefill, with T·H pairs, mostly runs S = 1. GQA: query head h
// reads kv head h / (H / Hkv); the heads sharing a kv head read the same rows, mostly from L2
// (reading them once for the whole group is the next step).
//
// Measured (H200, 2026-11-30, gdn ops --perf), Bonsai decode at 4096 keys (33.5 MB of K/V):
// 296 µs with one CTA per (t, h), 48 µs with S = 8 — 19% of the same-size read ceiling. The
// rest is L2 traffic: each of the 6 query heads of a group reads its kv head's rows, 200 MB
// through L2 per call; a kernel that reads them once per group is the fix.
//
// Codes out (decode, D a multiple of 128: attention()'s CodesOut): the cluster's first CTA
// also applies attn_output's MulGate prologue (out·gate) to the head it writes and quantises
// its D / 128 activation blocks with one warp, so that attn_output copies the codes instead of
// staging and quantising all of x in each of its CTAs. Measured (H200, 2026-12-02, timeline
// at position 17, bench/RESULTS.md): attn_output 6.67 -> 5.38 µs a step, and attention 5.8 ->
// 6.9 while the gate was loaded after the merge (one more round trip); loaded with q (below),
// attention takes 5.5.
//
// Precision vs the CPU (double throughout): a score's dot rounds over D/32 terms per lane and
// 5 butterfly levels (error ≲ 13·2^-24·Σ|q_i k_i|/√D, which exp turns into a relative error
// of the weight); the accumulators round once per key of the warp's share and once per merge
// level. The op check allows 3e-5 of max|out| (see checks_ops.cpp).
#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "cuda/act_quantize.cuh"
#include "cuda/async_copy.cuh"
#include "cuda/kernel_util.cuh"
#include "cuda/matmul.cuh"
#include "cuda/norm.cuh"
#include "model/fusion.h"

namespace gdn::cuda {
namespace {

using detail::row_ptr;

constexpr int kMaxHeadDim = 256;  // attention's and its prep's largest head
// The program builder fuses the prep (Step::fuse_prep) only for heads this kernel takes.
static_assert(model::kMaxAttnPrepHeadDim <= kMaxHeadDim, "the prep's head limit");

// ---------------------------------------------------------------------------------------------
// rope

constexpr int kRopeThreads = 256;

// Pair i's rotation for position pos and its application to a head in place (x_i,
// x_{i+half}): the rope kernel's arithmetic, shared with the fused prep, which computes the angles
// before its inputs are ready. The products and sums are rounded one by one (__dmul_rn,
// __dsub_rn, __dadd_rn: never contracted into an FMA), as the CPU computes them, so that every
// kernel calling these rounds alike whatever the compiler does around them.
struct RopeAngle {
  double sn, cs;
};
__device__ __forceinline__ RopeAngle rope_angle(int i, int64_t pos, int n_rot, float theta) {
  const double angle = double(pos) * pow(double(theta), -2.0 * double(i) / double(n_rot));
  RopeAngle r;
  sincos(angle, &r.sn, &r.cs);
  return r;
}
__device__ __forceinline__ void rope_rotate(float* xh, int i, int half, RopeAngle r) {
  const double a = xh[i], b = xh[i + half];
  xh[i] = static_cast<float>(__dsub_rn(__dmul_rn(a, r.cs), __dmul_rn(b, r.sn)));
  xh[i + half] = static_cast<float>(__dadd_rn(__dmul_rn(a, r.sn), __dmul_rn(b, r.cs)));
}

__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(DevRows x, int head_dim, int n_rot, int n_head, float theta, int64_t pos_host,
                const int32_t* pos_dev) {
  detail::pdl_enter();
  const int64_t pos0 = pos_dev ? *pos_dev : pos_host;
  const int half = n_rot / 2;
  const int64_t per_row = int64_t(n_head) * half, n = x.rows * per_row;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < n;
       p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = p / per_row;
    const int hp = static_cast<int>(p - t * per_row), h = hp / half, i = hp - h * half;
    rope_rotate(row_ptr(x, t) + int64_t(h) * head_dim, i, half,
                rope_angle(i, pos0 + t, n_rot, theta));
  }
}

// ---------------------------------------------------------------------------------------------
// The fused preparation (attention()'s AttnPrep: rung norm-gemv-fused, one token), bit-identical
// to the unfused sequence
//   split_heads(qg → q, gate); rms_norm(q, q_norm, head_dim); rope(q);
//   rms_norm(k, k_norm, head_dim); rope(k); kv_store(k, v)
// for these reasons: one warp normalises a head (q, or its kv head's k) from norm.cuh's
// canonical tile (lane j: elements j + 32e, one virtual warp: head_dim <= 256), adding the
// squares in that order (norm::head_sum_squares_of_tile, the norm kernel's order for such a
// chunk); each element becomes (x·scale)·w as in norm_kernel, is staged in shared memory and
// rotated by rope_angle / rope_rotate (the rope kernel's arithmetic). With gate_sigmoid the
// gate is stored as detail::sigmoid(gate), the value binary SigmoidMul multiplies by: attn_output's
// MulGate prologue then multiplies by it as it is, once per element here instead of in each of
// its CTAs. Measured as its own launch (H200, 2026-12-01, Bonsai decode): the six dispatches
// (split 3.06 µs, two rms_norm ~1, two rope 2.18, kv_store 1.64 in the timeline: ~171
// µs/token) became one of 6.41 (102.5 µs/token); tg128 290.0 -> 295.5. With the angles computed
// before pdl_wait: 4.37 µs a step; with the gate loaded beside the head, 3.03 (H100, 2026-12-05:
// 3.20-3.27). Inside the attention kernel it costs no launch: every CTA prepares its own q head
// and its kv head's new key and value in shared memory (its key loop reads the new position from
// there: no other CTA's write needs to be waited for), and one CTA per kv head stores them.
// Measured (H100, 2026-12-05, Bonsai decode, against the prep kernel in the same call): an
// attention layer's q+k+v, prep, attention and attn_output steps 24.70 -> 23.23 µs in the
// timeline, tg128 +0.8-1.1% at 324 dispatches a token (340), pp512 unchanged.

constexpr int kPairsPerLane = kMaxHeadDim / 2 / 32;

// One warp: head src[0, D) normalised by w into hd (shared memory), then rotated by the angles
// of the lane's pairs.
__device__ __forceinline__ void norm_rope_head(const float* src, const float* w, int D, int half,
                                               float eps, const RopeAngle (&angle)[kPairsPerLane],
                                               float* hd, int lane) {
  float v[norm::kPerThread];
  norm::load_tile(src, D, 0, 0, v);
  const float scale = norm::rms_scale(norm::head_sum_squares_of_tile(v), D, eps);
#pragma unroll
  for (int e = 0; e < norm::kPerThread; ++e) {
    const int i = norm::tile_index(D, 0, lane, e);
    if (i < D) hd[i] = v[e] * scale * w[i];  // norm_kernel: (x·scale)·w
  }
  __syncwarp();
#pragma unroll
  for (int k = 0; k < kPairsPerLane; ++k) {
    const int i = lane + 32 * k;
    if (i < half) rope_rotate(hd, i, half, angle[k]);
  }
  __syncwarp();
}

// ---------------------------------------------------------------------------------------------
// attention

constexpr int kAttnWarps = 8;
constexpr int kAttnThreads = kAttnWarps * 32;
constexpr int kBatch = 4;               // keys per warp per iteration: 4 independent dots in flight
constexpr int kMaxSplit = 8;            // CTAs per (t, h): the portable cluster size
constexpr int64_t kMinSplitKeys = 128;  // keys a CTA should get before the keys are split

struct AttnArgs {
  DevRows q, out;  // q: with prep, the raw qg [1][H·2D] (per head q | gate)
  float* k_cache;  // written only by the prep
  float* v_cache;
  int n_head, group, head_dim, kv_dim;
  int64_t pos0;
  const int32_t* pos_dev;  // if set, the position is read here at run time (graphs)
  float scale;             // 1/√D
  CodesOut codes;          // attention()'s codes out (one token)
  // The fused preparation (one token; null q_norm: none): k, v the raw rows [1][Hkv·D], gate
  // [1][H·D] written.
  DevRows k, v, gate;
  const float* q_norm;
  const float* k_norm;
  int n_rot;
  float theta, eps;
  bool gate_sigmoid;
  double* angles;  // AttnPrep::angles, angles_given
  bool angles_given;
};

// The prep by warps 0-2 of every CTA, before its key loop: q head h (qg: its q | gate) into s_q,
// the new key and value of kv head kvh into s_k and s_v; with `store` this CTA also writes them
// to the caches at position own (one CTA per kv head does). Every thread calls it.
__device__ __forceinline__ void prepare_heads(const AttnArgs& a, const float* qg, int kvh,
                                              int64_t own, bool store,
                                              RopeAngle (&angle)[kPairsPerLane], float* s_q,
                                              float* s_k, float* s_v) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, D = a.head_dim, half = a.n_rot / 2;
  const int64_t col = int64_t(kvh) * D, at = own * a.kv_dim + col;
  if (warp < 2) {
#pragma unroll
    for (int k = 0; k < kPairsPerLane; ++k) {
      const int i = lane + 32 * k;
      if (i >= half) continue;
      if (a.angles_given) {
        angle[k] = {a.angles[2 * i], a.angles[2 * i + 1]};
      } else if (a.angles && warp == 0 && blockIdx.x == 0) {
        a.angles[2 * i] = angle[k].sn;
        a.angles[2 * i + 1] = angle[k].cs;
      }
    }
  }
  if (warp == 0) norm_rope_head(qg, a.q_norm, D, half, a.eps, angle, s_q, lane);
  if (warp == 1) {
    norm_rope_head(row_ptr(a.k, 0) + col, a.k_norm, D, half, a.eps, angle, s_k, lane);
    if (store) {
      for (int i = lane; i < D; i += 32) a.k_cache[at + i] = s_k[i];
    }
  }
  if (warp == 2) {
    float v[norm::kPerThread];
    norm::load_tile(row_ptr(a.v, 0) + col, D, 0, 0, v);
#pragma unroll
    for (int e = 0; e < norm::kPerThread; ++e) {
      const int i = norm::tile_index(D, 0, lane, e);
      if (i < D) {
        s_v[i] = v[e];
        if (store) a.v_cache[at + i] = v[e];
      }
    }
  }
  __syncthreads();  // the heads in shared memory are complete before any warp reads them
}

// Merges n partial softmax states (m_i, l_i, o_i): with M = max m_i (finite: some part holds
// key 0), l = Σ l_i·e^(m_i − M) and o = Σ o_i·e^(m_i − M). A part that saw no key has
// m = −inf, l = 0, o = 0 and weight e^(−inf) = 0. Element i of o only (o_at(part)).
template <class M, class L, class O>
__device__ __forceinline__ void merge_parts(int n, M m_at, L l_at, O o_at, float& l, float& o) {
  float mx = -INFINITY;
  for (int p = 0; p < n; ++p) mx = fmaxf(mx, m_at(p));
  l = 0.0f;
  o = 0.0f;
  if (mx == -INFINITY) return;  // no part saw a key (a CTA whose share is empty)
  for (int p = 0; p < n; ++p) {
    const float f = expf(m_at(p) - mx);
    l = fmaf(l_at(p), f, l);
    o = fmaf(o_at(p), f, o);
  }
}

// kDims: head-dim elements per lane (D ≤ 32·kDims); dim i of a row lives on lane i % 32,
// slot i / 32. Launched in clusters of S CTAs along x; cluster c = t·H + h.
template <int kDims>
__global__ void __launch_bounds__(kAttnThreads) attention_kernel(AttnArgs a) {
  namespace cg = cooperative_groups;
  __shared__ float s_m[kAttnWarps], s_l[kAttnWarps], s_o[kAttnWarps][32 * kDims];
  // The first CTA's: every CTA's merged partial, by rank, and the mbarrier counting their bytes.
  __shared__ float r_m[kMaxSplit], r_l[kMaxSplit], r_o[kMaxSplit][32 * kDims];
  __shared__ uint64_t r_bar;
  __shared__ float4 s_stage[kMaxHeadDim / 4];  // codes out: p(out) of the head, at stage_pos
  __shared__ float s_q[kMaxHeadDim], s_k[kMaxHeadDim], s_v[kMaxHeadDim];  // the prep's heads

  detail::pdl_launch_dependents();
  const cg::cluster_group cluster = cg::this_cluster();
  const int n_split = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t pair = blockIdx.x / n_split;
  const int64_t t = pair / a.n_head;
  const int h = static_cast<int>(pair % a.n_head), kvh = h / a.group;
  const int D = a.head_dim;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // st.async needs a cluster of more than one CTA (PTX ISA: undefined in a cluster of one), so
  // with S = 1 (most prefills) the partial is stored plainly and met at a CTA barrier.
  const bool remote = n_split > 1;
  if (remote && rank == 0 && threadIdx.x == 0) {
    mm::mbar_init(&r_bar, 1);
    mm::mbar_arrive_expect_tx(&r_bar, unsigned(n_split * (D + 2)) * sizeof(float));
    mm::fence_mbar_init_cluster();
  }
  if (remote) mm::cluster_arrive();  // the sends wait for it: every CTA started, r_bar is set
  // The position is settled before the wait: the host copies it before the graph starts.
  const int64_t n_kv = (a.pos_dev ? *a.pos_dev : a.pos0) + t + 1;  // causal: 0 .. pos0 + t
  const float* kb = a.k_cache + int64_t(kvh) * D;
  const float* vb = a.v_cache + int64_t(kvh) * D;
  // The prep's angles depend on the position alone, which the host writes before the launch
  // (or the graph replay) and no kernel writes: the pow and sincos chain runs before the wait.
  // That overlaps nothing here (the GEMV before leaves no room for this kernel's CTAs), so the
  // token's later attention layers load the first one's angles instead. Measured (H100,
  // 2026-12-05, gdn bench --timeline): computed in every layer, the q+k+v step took 10.24 µs
  // (8.53 before the prep moved here, when the prep kernel's CTAs fitted beside the GEMV's).
  const bool prep = a.q_norm != nullptr;
  const int64_t own = prep ? n_kv - 1 : -1;  // the new key: in s_k / s_v with the prep
  const int half = a.n_rot / 2;
  RopeAngle angle[kPairsPerLane];
  if (prep && !a.angles_given && warp < 2) {
#pragma unroll
    for (int k = 0; k < kPairsPerLane; ++k) {
      const int i = lane + 32 * k;
      if (i < half) angle[k] = rope_angle(i, own, a.n_rot, a.theta);
    }
  }
  const int64_t step = int64_t(n_split) * kAttnWarps * kBatch;
  const int64_t s_first = (int64_t(rank) * kAttnWarps + warp) * kBatch;
  static_assert(kBatch == 4, "the prefetch's lanes: 4 batches x 4 keys x (K, V)");
  if ((D & 3) == 0) {  // rows of whole 16-byte units (the bulk prefetch's grain)
    // Lane 8j + 2b + kind asks L2 for the K (kind 0) or V row of key b of the warp's batch j:
    // its first four batches, before the wait (the rows of earlier tokens were evicted by the
    // ~4 GB of weights since). This step's own row (written with the prep, or by the unfused
    // kv_store) may be asked for early: L2 is where its writes land, so the hint stays harmless.
    // Measured (H200, 2026-12-02, gdn bench --timeline at position 17): the attention step 6.66
    // -> 5.80 µs.
    const int64_t s = s_first + (lane >> 3) * step + ((lane >> 1) & 3);
    if (s < n_kv) {
      detail::prefetch_l2((lane & 1 ? vb : kb) + s * a.kv_dim, uint32_t(D) * sizeof(float));
    }
  }
  detail::pdl_wait();

  // Codes out: the first CTA's gate element of its thread, loaded with q so that it arrives in
  // q's round trip; asked for after the merge it was one more round trip on the hand-off's
  // path (at position 17 the merge hides little). Measured (H200, 2026-12-02, gdn bench
  // --timeline): the attention step 6.86 -> 5.53 µs, tg128 337.2 / 337.5 -> 339.2 / 339.0; 94
  // registers at kDims = 8 (80 before).
  const bool codes = a.codes.act != nullptr;
  float gate = 0.0f;
  const float* qh;
  if (prep) {
    const float* qg = row_ptr(a.q, 0) + int64_t(h) * 2 * D;
    if (threadIdx.x < D) {
      const float g = qg[D + threadIdx.x];
      gate = a.gate_sigmoid ? detail::sigmoid(g) : g;
      if (rank == 0) row_ptr(a.gate, 0)[int64_t(h) * D + threadIdx.x] = gate;
    }
    prepare_heads(a, qg, kvh, own, rank == 0 && h % a.group == 0, angle, s_q, s_k, s_v);
    qh = s_q;
  } else {
    if (codes && rank == 0 && threadIdx.x < D) gate = a.codes.gate[int64_t(h) * D + threadIdx.x];
    qh = row_ptr(a.q, t) + int64_t(h) * D;
  }
  float qr[kDims], o[kDims];
#pragma unroll
  for (int m = 0; m < kDims; ++m) {
    const int i = lane + 32 * m;
    qr[m] = i < D ? qh[i] : 0.0f;
    o[m] = 0.0f;
  }

  float m_run = -INFINITY, l_run = 0.0f;
  for (int64_t s0 = s_first; s0 < n_kv; s0 += step) {
    float sc[kBatch], vv[kBatch][kDims];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t s = s0 + b;
      const float* kr = s == own ? s_k : kb + s * a.kv_dim;
      const float* vr = s == own ? s_v : vb + s * a.kv_dim;
      float dot = 0.0f;
#pragma unroll
      for (int m = 0; m < kDims; ++m) {
        const int i = lane + 32 * m;
        const bool ok = s < n_kv && i < D;
        dot = fmaf(qr[m], ok ? kr[i] : 0.0f, dot);
        vv[b][m] = ok ? vr[i] : 0.0f;
      }
      sc[b] = dot;
    }
    float mx = m_run;
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      sc[b] = s0 + b < n_kv ? detail::warp_sum(sc[b]) * a.scale : -INFINITY;
      mx = fmaxf(mx, sc[b]);
    }
    // mx is finite: key s0 < n_kv is in the batch. On the first batch m_run = −inf and the
    // rescale factor is exp(−inf) = 0, applied to a zero accumulator.
    const float alpha = expf(m_run - mx);
    l_run *= alpha;
#pragma unroll
    for (int m = 0; m < kDims; ++m) o[m] *= alpha;
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const float p = expf(sc[b] - mx);  // 0 for keys past n_kv
      l_run += p;
#pragma unroll
      for (int m = 0; m < kDims; ++m) o[m] = fmaf(p, vv[b][m], o[m]);
    }
    m_run = mx;
  }

  if (lane == 0) s_m[warp] = m_run, s_l[warp] = l_run;
#pragma unroll
  for (int m = 0; m < kDims; ++m) s_o[warp][lane + 32 * m] = o[m];
  __syncthreads();  // every warp's (max, sum, accumulator) is visible before the CTA merge

  float mx = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) mx = fmaxf(mx, s_m[w]);
  if (remote) mm::cluster_wait();
  // Element i of this CTA's merged partial (with i = 0 also its m and l) into the first CTA.
  const auto send = [&](float* to, float v) {
    if (remote) {
      mm::st_async_to_rank(to, 0, v, &r_bar);
    } else {
      *to = v;
    }
  };
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    float l, oi;
    merge_parts(
        kAttnWarps, [&](int w) { return s_m[w]; }, [&](int w) { return s_l[w]; },
        [&](int w) { return s_o[w][i]; }, l, oi);
    send(&r_o[rank][i], oi);
    if (i == 0) {
      send(&r_m[rank], mx);
      send(&r_l[rank], l);
    }
  }
  if (rank != 0) return;  // the first CTA waits for every byte sent to it before it exits

  if (remote) {
    mm::mbar_wait_cluster(&r_bar, 0);
  } else {
    __syncthreads();
  }
  float* oh = row_ptr(a.out, t) + int64_t(h) * D;
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    float l, oi;
    merge_parts(
        n_split, [&](int r) { return r_m[r]; }, [&](int r) { return r_l[r]; },
        [&](int r) { return r_o[r][i]; }, l, oi);
    const float y = oi / l;
    oh[i] = y;
    if (codes) {  // attn_output's MulGate prologue, p = out·gate, staged as its GEMV stages it
      reinterpret_cast<float*>(s_stage)[4 * mm::stage_pos(i >> 2) + (i & 3)] =
          mm::prologue_value<model::Prologue::MulGate>(y, gate, 0.0f, 0.0f);
    }
  }
  if (codes) {  // the head's D / 128 blocks quantised by warp 0 (mm::quantise_staged_blocks)
    __syncthreads();
    const int blocks = D / 128;
    if (warp == 0) {
      mm::quantise_staged_blocks(s_stage, blocks, lane, a.codes.act,
                                 static_cast<mm::ActMeta*>(a.codes.meta), int64_t(h) * blocks);
    }
  }
}

template <int kDims>
void launch_attention(const AttnArgs& a, int64_t rows, int split, cudaStream_t s) {
  if constexpr (kDims < kMaxHeadDim / 32) {
    if (a.head_dim > 32 * kDims) return launch_attention<kDims * 2>(a, rows, split, s);
  }
  // Always a cluster launch (of 1 CTA when split is 1): the kernel merges through the cluster.
  detail::launch_clusters(&attention_kernel<kDims>,
                          dim3(static_cast<unsigned>(rows * a.n_head * split)), kAttnThreads, 0,
                          true, static_cast<unsigned>(split), s, a);
}

}  // namespace

void rope(DevRows x, int64_t head_dim, int64_t n_rot, float theta, Pos pos, cudaStream_t s) {
  const int64_t pos0 = pos.host;
  detail::check_view("rope", "x", x);
  if (head_dim <= 0 || x.cols % head_dim != 0 || n_rot <= 0 || n_rot % 2 != 0 || n_rot > head_dim ||
      pos0 < 0 || !(theta > 0.0f)) {
    fail("cuda rope: x [{}x{}] head_dim {} n_rot {} (even, <= head_dim) theta {} pos0 {}", x.rows,
         x.cols, head_dim, n_rot, theta, pos0);
  }
  const int64_t n_head = x.cols / head_dim, pairs = x.rows * n_head * (n_rot / 2);
  const unsigned blocks = static_cast<unsigned>(
      std::min<int64_t>(detail::ceil_div(pairs, kRopeThreads), 32 * sm_count()));
  detail::launch(&rope_kernel, blocks, kRopeThreads, 0, true, s, x, static_cast<int>(head_dim),
                 static_cast<int>(n_rot), static_cast<int>(n_head), theta, pos0, pos.device);
  CUDA_CHECK_LAUNCH();
}

bool attn_codes_out_ok(int64_t head_dim) {
  return head_dim > 0 && head_dim % 128 == 0 && head_dim <= kMaxHeadDim;
}

namespace {

// The prep's operands: one token, qg twice out's width, k and v one row of the caches' width,
// a gate like out, the norms, and a rotation that fits the head. Each refusal names its cause.
void check_prep(const AttnPrep& p, DevRows q, DevRows out, int64_t kv_dim, int64_t head_dim) {
  for (const auto& [name, view] :
       {std::pair{"k", p.k}, std::pair{"v", p.v}, std::pair{"gate", p.gate}}) {
    detail::check_view("attention prep", name, view);
  }
  detail::check_same_shape("attention prep", p.k, "k", p.v, "v");
  detail::check_same_shape("attention prep", p.gate, "gate", out, "out");
  if (q.rows != 1 || out.rows != 1 || p.k.rows != 1) {
    fail("cuda attention prep: one token only (qg {} rows, out {}, k {})", q.rows, out.rows,
         p.k.rows);
  }
  if (q.cols != 2 * out.cols) {
    fail("cuda attention prep: qg [1x{}] must be twice out's {} columns (q | gate per head)",
         q.cols, out.cols);
  }
  if (p.k.cols != kv_dim) {
    fail("cuda attention prep: k, v [1x{}] must have the caches' {} columns", p.k.cols, kv_dim);
  }
  if (p.n_rot <= 0 || p.n_rot % 2 != 0 || p.n_rot > head_dim) {
    fail("cuda attention prep: n_rot {} must be even, positive and at most head_dim {}", p.n_rot,
         head_dim);
  }
  if (!(p.theta > 0.0f) || !(p.eps >= 0.0f)) {
    fail("cuda attention prep: theta {} must be positive and eps {} not negative", p.theta, p.eps);
  }
  if (p.q_norm == nullptr || p.k_norm == nullptr) {
    fail("cuda attention prep: q_norm and k_norm must be set");
  }
  if (p.angles_given && p.angles == nullptr) {
    fail("cuda attention prep: angles given without their buffer");
  }
}

}  // namespace

void attention(DevRows q, float* k_cache, float* v_cache, DevRows out, int64_t n_head,
               int64_t n_head_kv, int64_t head_dim, Pos pos, cudaStream_t s, const CodesOut& codes,
               const AttnPrep* prep) {
  // The split is sized by pos.plan() (the bound when given); CTAs whose share of keys is
  // empty merge as empty parts.
  const int64_t pos0 = pos.host;
  detail::check_view("attention", "q", q);
  detail::check_view("attention", "out", out);
  if (prep) {
    check_prep(*prep, q, out, n_head_kv * head_dim, head_dim);
  } else {
    detail::check_same_shape("attention", q, "q", out, "out");
  }
  if (n_head < 1 || n_head_kv < 1 || n_head % n_head_kv != 0 || head_dim < 1 ||
      head_dim > kMaxHeadDim || out.cols != n_head * head_dim || pos0 < 0 || k_cache == nullptr ||
      v_cache == nullptr || out.rows * n_head > INT32_MAX) {
    fail(
        "cuda attention: out [{}x{}] with H {} Hkv {} D {} (D <= {}, H a multiple of Hkv) "
        "at position {}",
        out.rows, out.cols, n_head, n_head_kv, head_dim, kMaxHeadDim, pos0);
  }
  if (codes.act != nullptr && (!attn_codes_out_ok(head_dim) || q.rows != 1 ||
                               codes.meta == nullptr || (codes.gate == nullptr && !prep))) {
    fail(
        "cuda attention: codes out need one token (got {}), D a multiple of 128 up to {} (got "
        "{}), meta and gate set",
        q.rows, kMaxHeadDim, head_dim);
  }
  const AttnPrep none{};
  const AttnPrep& p = prep ? *prep : none;
  const AttnArgs a{q,
                   out,
                   k_cache,
                   v_cache,
                   static_cast<int>(n_head),
                   static_cast<int>(n_head / n_head_kv),
                   static_cast<int>(head_dim),
                   static_cast<int>(n_head_kv * head_dim),
                   pos0,
                   pos.device,
                   static_cast<float>(1.0 / std::sqrt(double(head_dim))),
                   codes,
                   p.k,
                   p.v,
                   p.gate,
                   p.q_norm,
                   p.k_norm,
                   static_cast<int>(p.n_rot),
                   p.theta,
                   p.eps,
                   p.gate_sigmoid,
                   p.angles,
                   p.angles_given};
  // The key split: doubled while the grid is under two CTAs per SM and every CTA keeps at
  // least kMinSplitKeys of the longest row's keys. A decode sized by its bound runs S = 8 at
  // positions where 1 or 2 would do; that costs nothing: at -c 160 (S = 1) attention is 0.8 µs
  // shorter but q+k+v and attn_output beside it as much longer, tg128 354.3 against 356.8-357.1
  // (H100, 2026-12-06, scripts/device.sh tgctx).
  const int64_t pairs = out.rows * n_head, max_kv = pos.plan() + out.rows;
  const int64_t min_ctas = 2 * int64_t(sm_count());
  int split = 1;
  while (split < kMaxSplit && pairs * split < min_ctas && max_kv >= 2 * split * kMinSplitKeys) {
    split *= 2;
  }
  if (pairs * split > INT32_MAX)
    fail("cuda attention: {} rows x {} heads exceed the grid", out.rows, n_head);
  launch_attention<1>(a, out.rows, split, s);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gdn::cuda
