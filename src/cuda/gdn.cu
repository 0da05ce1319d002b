// gdn_recurrence: the gated delta rule over the T tokens of a step, per value head h (key
// head h % Hk), state S [d][d] (S[i][j]: key dim i, value dim j), for each token:
//   S ← e^g·S;  δ = β(v − Sᵀk);  S ← S + kδᵀ;  o = Sᵀq / √d.
//
// Decode reads the whole state once and writes it once (Bonsai: 48 heads × 64 KB = 3 MB per
// layer), so the kernel is built to stream it: every state element is loaded once into a
// register, kept there across all T tokens (prefill loops over tokens inside the kernel), and
// stored once.
//
// Layout. Column j of S evolves on its own: δ_j needs only column j (and all of k), and
// o_j = Σ_i S'_ij q_i with S' = e^g·S + kδᵀ equals e^g·(Sᵀq)_j + δ_j·(k·q). So a CTA owns one
// head and a slice of kCols value columns; its 8 warps split the key dim. A warp is
// 32/kCols row groups × kCols columns; thread (group r, column c) holds S[r + G·m][c] for
// m < kRows (G = 8·32/kCols row groups in the CTA). One warp load instruction reads
// 32/kCols rows × kCols consecutive floats (kCols·4 ≥ 32 bytes: whole sectors), coalesced.
// kCols ∈ {32, 16, 8} is the widest slice that still gives at least two CTAs per SM
// (Bonsai on 132 SMs: 16 → 384 CTAs), read from the device, never hard-coded.
//
// Per token, one reduction phase: each thread forms three partial sums over its rows —
// Σ S_ij k_i, Σ S_ij q_i (with S already decayed) and Σ k_i q_i — reduces them over the row
// groups of its warp with xor shuffles (lanes that share a column), then across warps through
// shared memory, every thread adding the 8 warp partials in warp order (deterministic, no
// atomics, and every thread of a column gets the same δ). Then δ_j, the rank-1 update of the
// thread's registers, and o_j (written by warp 0).
//
// Staging and barriers. q and k of the key head (d floats each), the slice of v, g and β are
// staged in shared memory through a ring of kStages = 4 token slots filled by asynchronous
// copies (cp.async, one element per thread: d ≤ 256 = the CTA's threads), issued three
// tokens ahead, so a prefill does not pay a global-memory latency per token. Two barriers
// per token:
//   B1 (top of token t, after this thread's wait for its own copies of token t): every
//      thread's copies of token t are visible, and every thread has finished token t−1 — so
//      its slot may be refilled (with token t + 3) and the reduction buffer overwritten.
//   B2 (after the partial sums): every warp's partials are visible before they are summed.
//
// Precision vs the CPU (which sums in double and applies the update before computing o):
// each token's sums round in f32 over kRows terms per thread plus log2(32/kCols) shuffle and
// 8 warp levels (≲ 40 roundings of 2^-24 worst case, ~2e-6 relative, typically ≲ 5e-7); the
// update e^g·S + kδ rounds once per element (fmaf) where the CPU rounds twice. With
// L2-normalised k and β ∈ (0, 1) the update I − βkkᵀ and e^g ≤ 1 do not amplify old errors,
// so they add up at most linearly over tokens: the op check allows 4e-6 + 4e-7·T (measured
// errors: ~2e-7 at every T checked, up to 64).
//
// Measured (H200, 2026-11-30, gdn ops --perf): Bonsai decode (6.3 MB state read + written)
// 3.70 µs, 1.7 TB/s, 87% of a plain read kernel moving as many bytes (3.94 µs with register
// prefetch one token ahead instead of the cp.async ring). Bonsai prefill of 512 tokens:
// 551 µs, ~1.1 µs a token, bound by the per-token reduction and its two barriers; 4 warps per
// CTA instead of 8 (half the cross-warp partial sums) gave 497 µs but 4.1 µs for decode.
// (Those numbers predate the storage types and fusions below: the f32 unfused instantiation
// keeps the same loop, and its register count fell (Bonsai decode 54 → 47); re-measure.)
//
// Storage types and fusions (the ladder's GDN rungs). The state is read from state_in and
// written to state_out (the same buffer, or two disjoint ones), each f32, f16 or bf16: a load
// widens exactly, a store rounds to nearest even once (cuda/state.cuh, shared with
// copy_state), and everything between is the f32 arithmetic above. Gating (dt_bias, ssm_a)
// and q/k L2 normalisation can be fused; each reuses the unfused kernels' device code in
// their order, so every combination is bit-identical to the unfused sequence
//   l2_norm(q), l2_norm(k); sigmoid(b); add_vec(a, dt_bias), softplus, mul_vec(ssm_a);
//   copy_state(slot → f32 work); gdn_recurrence(work, in place); copy_state(work → slot)
// for these reasons:
//   * State: a widened value is the value copy_state would have written to the f32 work
//     buffer; the recurrence's arithmetic does not depend on where the state came from (the
//     storage type only picks the load and the store loop, a uniform switch outside the token
//     loop); the final rounding is the one copy_state applies to the same f32. Widening then
//     rounding (f16 → f32 → f16) returns the stored value, so an untouched state is unchanged.
//   * Gating: every thread recomputes β = sigmoid(b) and g = softplus(a + dt_bias[h])·ssm_a[h]
//     with detail::sigmoid/softplus (the Sigmoid and Softplus functors' functions) and the
//     AddVec/MulVec operations as __fadd_rn/__fmul_rn: correctly rounded like the unfused
//     kernels' stored x + v and x·v, and never contracted into an FMA with neighbouring
//     arithmetic (the unfused values pass through memory, so nothing could contract there).
//   * L2 norm: q and k are staged raw; every warp computes the head's sums of squares with
//     norm::head_sum_squares (the l2_norm kernel's canonical order, norm.cuh) and the scale
//     with norm::l2_scale, and every read of q_i / k_i becomes __fmul_rn(x_i, scale): the value
//     l2_norm would have stored (x·scale, correctly rounded). Each warp derives the same scale
//     from the same smem values, so no extra barrier is needed; the cost is two warp
//     reductions per token and one multiply per staged read.
//   * The recurrence's own arithmetic is pinned: explicit fmaf where a product meets a sum
//     (o = fmaf(δ, k·q, Sᵀq)), so no instantiation depends on the compiler's contraction
//     choices.
// f16/bf16 decode reads and writes half the bytes; with kCols ≥ 16 a warp row segment is
// still a whole 32-byte sector (kCols = 8, small models only, uses half of one).
//
// Codes out (decode, d = 128: GdnFusion::codes). ssm_out's fused GEMV would stage its input
// p(o) = rms_norm(o head)·gate and quantise all of it in each of its CTAs, ~4.6 µs of its
// ~7 after the wait (bench/gemv_lab). A head is exactly one 128-element activation block, so
// the recurrence does it once per head instead: its CTAs run as one cluster, gather the
// head's outputs in the first CTA, and one warp there applies the prologue and the quantiser
// with their own device code (send_codes_output, quantise_head). Measured (H200, 2026-12-02,
// bench/RESULTS.md): ssm_out 8.81 -> 5.40 µs a step, the recurrence 4.45 -> 5.87; with attention's
// codes out, tg128 325.1 -> 336.7.
//
// The state is written every decode token. Never writing it (a timing bound, wrong output)
// took the recurrence from 5.20 to 4.46 µs and tg128 +2.6% (H100, 2026-12-07). A deferred write
// that reached the same bits was built in four forms (branch s65-deferred-state-write, deleted):
// the f32 state written every 4th token, the three tokens between logging their rank-1 update
// (k, δ, e^g), the next launch replaying the log onto the state it loads. Every form lost 0.4-0.7%
// tg128. ncu: each replayed entry costs ~0.3-0.5 µs, as much as a skipped write saves alone:
// 73 instructions a warp (8 predicated LDS, FMUL, FFMA and their index checks), ~1700 on each
// SM's 23 warps, issued at ~0.55 a scheduler-cycle. Even a free replay would have left little:
// the decode's recurrence took 5.55 µs a step against 5.21, less 1.5 entries a launch at ~0.3
// is ~5.1, so the logging had already spent most of what the skipped writes saved (an
// estimate; bench/RESULTS.md has the measurements).
#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#include <cmath>

#include "cuda/act_quantize.cuh"
#include "cuda/async_copy.cuh"
#include "cuda/kernel_util.cuh"
#include "cuda/matmul.cuh"
#include "cuda/norm.cuh"
#include "cuda/state.cuh"

namespace gdn::cuda {
namespace {

using detail::row_ptr;
using model::StateType;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxD = kThreads;  // each thread stages one q and one k element
constexpr int kCodesD = 128;     // codes out: a head is one activation block
// The key dim of every qwen35 model we know (Qwen3.5 / 3.6, Bonsai): where it fills a kernel's
// tile, that kernel is instantiated with it as a constant (gdn_kernel's kD).
constexpr int kConstantD = 128;
constexpr int kMaxClusterCtas = 8;  // portable cluster size

struct GdnArgs {
  DevRows q, k, v, g, beta, out;
  const void* state_in;  // [Hv][d][d] of in_type
  void* state_out;       // [Hv][d][d] of out_type (may equal state_in)
  StateType in_type, out_type;
  bool state_settled;    // state_in may be read before pdl_wait (DevState::settled)
  const float* dt_bias;  // gating fused when set (ssm_a set too): g, beta hold a, b
  const float* ssm_a;
  int n_k_heads, d;
  float q_scale;   // 1/√d
  float l2_eps;    // the fused L2 norm's eps (kL2 instantiations)
  CodesOut codes;  // GdnFusion::codes; the launch is in clusters of a head's CTAs when set
};

// Staging ring depth: token t + kStages − 1 is being copied while token t is computed.
constexpr int kStages = 4;

// Issues this thread's asynchronous copies of token t into one ring slot: q[tid], k[tid] of
// the key head (tid < d), v of column col0 + tid (tid < kCols, column < d), g and β (thread
// 0). Entries no thread copies stay zero (set once before the loop).
template <int kCols>
__device__ __forceinline__ void stage_token(const GdnArgs& a, int d, int64_t t, int h, int kh,
                                            int col0, float* q, float* k, float* v, float* g,
                                            float* b) {
  const int tid = threadIdx.x;
  if (tid < d) {
    __pipeline_memcpy_async(q + tid, row_ptr(a.q, t) + kh * d + tid, sizeof(float));
    __pipeline_memcpy_async(k + tid, row_ptr(a.k, t) + kh * d + tid, sizeof(float));
  }
  if (tid < kCols && col0 + tid < d) {
    __pipeline_memcpy_async(v + tid, row_ptr(a.v, t) + h * d + col0 + tid, sizeof(float));
  }
  if (tid == 0) {
    __pipeline_memcpy_async(g, row_ptr(a.g, t) + h, sizeof(float));
    __pipeline_memcpy_async(b, row_ptr(a.beta, t) + h, sizeof(float));
  }
}

// This thread's state elements S[grp + kGroups·m][j] of one head, widened to f32 (zero
// outside the d × d head), each row reached by a pointer step of kGroups·d elements from one
// base (a pointer past the head is formed, never dereferenced). By S[int64_t(i) * d + j],
// ncu's executed counts put 119 instructions a warp on the load (addresses, predicates and its
// 8 loads), of the kernel's ~830 (23 warps an SM, issued at ~0.55 a scheduler-cycle); by
// 32-bit offsets grp·d + j + m·kGroups·d ~105 on the load and ~80 on the store, each element's
// offset widened and added to the base (H100, 2026-12-07). The offsets measured in one call:
// the decode's recurrence 5.15 -> 4.71 µs a step, tg128 +0.8%, more than the few dozen
// instructions a warp saved explain (what else moved in ptxas' schedule was not examined). The
// pointer step: PTX of gdn_kernel<16, 8, true> 1674 -> 1578 instructions, predicted tg128
// +0.4-0.8%, measured 381.27 against 380.27 (+0.3%, one round, within the spread; H100,
// 2026-12-07).
// kFull: every element of the tile lies inside the head (gdn_kernel's constant-d kernels), so
// no bound is checked.
template <class St, int kRows, int kGroups, bool kFull>
__device__ __forceinline__ void load_state(float (&s)[kRows], const void* state, int64_t head,
                                           int d, int grp, int j, bool col_ok) {
  const typename St::T* row =
      static_cast<const typename St::T*>(state) + head * d * d + grp * d + j;
#pragma unroll
  for (int m = 0; m < kRows; ++m, row += kGroups * d) {
    const int i = grp + kGroups * m;
    s[m] = kFull || (col_ok && i < d) ? St::load(*row) : 0.0f;
  }
}

template <class St, int kRows, int kGroups, bool kFull>
__device__ __forceinline__ void store_state(const float (&s)[kRows], void* state, int64_t head,
                                            int d, int grp, int j, bool col_ok) {
  typename St::T* row = static_cast<typename St::T*>(state) + head * d * d + grp * d + j;
#pragma unroll
  for (int m = 0; m < kRows; ++m, row += kGroups * d) {
    const int i = grp + kGroups * m;
    if (kFull || (col_ok && i < d)) *row = St::store(s[m]);
  }
}

// Four consecutive floats (p need not be 16-byte aligned).
__device__ __forceinline__ float4 load4(const float* p) {
  return make_float4(p[0], p[1], p[2], p[3]);
}

// Codes out (GdnArgs::codes), after the token: every CTA's warp 0 sends its columns' o into
// the cluster's first CTA (`head`, raw order) with st.async, and that CTA's warp 0 then does
// what ssm_out's HeadRmsNormMulGate prologue and quantiser do for this head's block
// (quantise_head). The sends complete transaction bytes on the first CTA's mbarrier `bar`
// (initialised, with the head's kCodesD · 4 bytes expected, before the entry's cluster
// arrive), so no CTA waits for another and none fences. A cluster.sync() here compiled to a
// GPU-scope membar that waited for the state's stores, ~30% of the recurrence's stall samples
// (ncu, H100, 2026-12-06); replaced so, the recurrence took 4.99 µs a step against 5.75 and
// tg128 was 353.6 / 354.3 against 349.6 / 349.8 (timeline, same call). Every thread calls it: the
// entry's arrive and this wait order the sends after every CTA of the cluster (the first one's
// mbarrier included) has started. A head's cluster has d / kCols = 4 or 8 CTAs, never one
// (st.async is undefined in a cluster of one).
__device__ void send_codes_output(bool writes, int j, float o, float4* head, uint64_t* bar) {
  mm::cluster_wait();
  if (writes) mm::st_async_to_rank(reinterpret_cast<float*>(head) + j, 0, o, bar);
}

// The first CTA's warp 0, once the head's outputs have landed: the head's sum of squares in
// norm.cuh's order for a 128-float chunk (one virtual warp, as prologue_scales), its
// rms_scale, p = prologue_value(o, gate, w, scale) staged at stage_pos, and the block
// quantised (mm::quantise_staged_blocks), with their device code.
//
// Gate and norm elements (4·lane..) are loaded before the wait, so that they arrive while the
// cluster gathers. Measured (H200, 2026-12-02, timeline): the recurrence took 5.87 µs a step
// so (4.45 without codes out), 6.04 with them loaded after the gathering, 7.49 loaded before
// the token and held in registers through it (64 -> 71 registers: 4 -> 3 CTAs an SM).
__device__ void quantise_head(const GdnArgs& a, int h, float4* head, uint64_t* bar) {
  const int lane = threadIdx.x & 31;
  const float4 g = load4(a.codes.gate + int64_t(h) * kCodesD + 4 * lane);
  const float4 w = load4(a.codes.norm + 4 * lane);
  mm::mbar_wait_cluster(bar, 0);
  float t[norm::kPerThread];
  norm::load_tile(reinterpret_cast<const float*>(head), kCodesD, 0, 0, t);
  const float scale = norm::rms_scale(norm::head_sum_squares_of_tile(t), kCodesD, a.codes.eps);
  const float4 x = head[lane];
  constexpr model::Prologue P = model::Prologue::HeadRmsNormMulGate;
  const float4 p = make_float4(
      mm::prologue_value<P>(x.x, g.x, w.x, scale), mm::prologue_value<P>(x.y, g.y, w.y, scale),
      mm::prologue_value<P>(x.z, g.z, w.z, scale), mm::prologue_value<P>(x.w, g.w, w.w, scale));
  __syncwarp();  // every raw output is read before the staged values overwrite them
  head[mm::stage_pos(lane)] = p;
  __syncwarp();
  mm::quantise_staged_blocks(head, 1, lane, a.codes.act, static_cast<mm::ActMeta*>(a.codes.meta),
                             h);
}

// Four CTAs an SM where a thread holds at most 8 rows (Bonsai: 16 columns x 8 rows): 64
// registers, no spill. Without the cap ptxas gave the kernel with the codes-out hand-off 71-72
// (3 CTAs an SM; Bonsai's 48 heads of 8 CTAs are 2.9 an SM). Larger kRows would spill at 64.
// kD: the key dim when it is known at compile time (kConstantD where it fills the tile), else
// 0 and a.d; a constant folds the kernel's index arithmetic and bounds checks, not its floats
// (PTX of <16, 8, true> 1559 -> 1273 instructions). With the pointer step above, tg128 383.24
// against 380.27 (+0.8%, one round, H100, 2026-12-07; bits identical: bench/RESULTS.md).
// With kFull (below), S·q and k·q summed by warp 0 alone and the keys kept for the update: a
// decode launch's executed warp instructions 2.02 M -> 1.63 M (ncu), the decode's recurrence
// 4.22 -> 3.95 µs a step, tg128 382.0 -> 385.7 (+1.0%, two rounds, H100, 2026-12-07). The
// gating formed once a CTA instead of in every warp (by warp 0 handing the decay over at a named
// barrier, or by a ninth warp holding no state) took them to 1.51 M / 1.59 M but gained nothing
// measurable: 3.90 / 3.85 µs a step, tg128 384.3 / 385.2. The launch issues at ~40% of its peak
// (ncu), so what is left of its time is not the instructions' count.
template <int kCols, int kRows, bool kL2, int kD>
__global__ void __launch_bounds__(kThreads, kRows <= 8 ? 4 : 1) gdn_kernel(GdnArgs a) {
  constexpr int kSub = 32 / kCols;        // row groups per warp
  constexpr int kGroups = kWarps * kSub;  // row groups per CTA
  static_assert(kCols * kSub == 32 && kRows * kGroups <= kMaxD, "slice shape");
  // The constant-d kernels fill their tile (launch_rows) and have d / kCols CTAs along x
  // (launch_cols), so every row and column a thread holds lies inside the head: the bounds
  // checks fold away (ptxas could not tell grp < kGroups or col0 + c < d itself).
  constexpr bool kFull = kD != 0;
  static_assert(!kFull || (kD == kRows * kGroups && kD % kCols == 0), "a full tile");
  detail::pdl_launch_dependents();
  __shared__ float s_q[kStages][kMaxD], s_k[kStages][kMaxD], s_v[kStages][kCols];
  __shared__ float4 s_head[kCodesD / 4];  // codes out: the head's outputs, then p(o) staged
  __shared__ uint64_t s_head_bar;         // codes out: the head's outputs have landed
  __shared__ float s_g[kStages], s_b[kStages];
  __shared__ float s_red[3][kWarps][kCols];  // per warp: Σ S·k, Σ S·q, Σ k·q per column

  const int d = kFull ? kD : a.d;
  const int h = blockIdx.y, kh = h % a.n_k_heads, col0 = blockIdx.x * kCols;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c = lane % kCols, grp = warp * kSub + lane / kCols;
  const int j = col0 + c;
  const bool col_ok = kFull || j < d;
  const bool codes = a.codes.act != nullptr;
  const bool first_cta = codes && cooperative_groups::this_cluster().block_rank() == 0;
  if (codes) {
    if (first_cta && threadIdx.x == 0) {
      mm::mbar_init(&s_head_bar, 1);
      mm::mbar_arrive_expect_tx(&s_head_bar, kCodesD * sizeof(float));
      mm::fence_mbar_init_cluster();
    }
    mm::cluster_arrive();
  }

  float s[kRows];  // S[grp + kGroups·m][j]
  // Uniform; the load (and store) loops differ only in the element type.
  const auto load = [&] {
    state::dispatch(a.in_type, [&](auto st) {
      load_state<decltype(st), kRows, kGroups, kFull>(s, a.state_in, h, d, grp, j, col_ok);
    });
  };
  // A settled state (the slot's) and the gating constants are read before the wait, so their
  // latency overlaps the previous kernel's tail; a work buffer only after it. Measured (H200,
  // 2026-12-01): tg128 299.5 -> 301.4 (+0.6%, about one sd): the recurrence's CTAs fit only
  // on SMs the qkv GEMV has left, so the overlap is its tail alone. Nor does the state's
  // DRAM latency bound the step: asked into L2 by the qkv GEMV at its entry, the recurrence
  // took 6.17 µs against 6.15 and the GEMV 0.3-0.4 µs more (H100, 2026-12-06).
  if (a.state_settled) load();
  const bool gating = a.dt_bias != nullptr;
  const float dt_bias = gating ? a.dt_bias[h] : 0.0f, ssm_a = gating ? a.ssm_a[h] : 0.0f;
  detail::pdl_wait();
  if (!a.state_settled) load();

  // Zero padding (entries past d, columns past d; a full tile has none) in every slot; ordered
  // before any read by the first B1. Exactly the entries no copy writes, so no plain store
  // races an async one.
  for (int slot = 0; slot < kStages && !kFull; ++slot) {
    if (threadIdx.x >= d) s_q[slot][threadIdx.x] = s_k[slot][threadIdx.x] = 0.0f;
    if (threadIdx.x < kCols && col0 + int(threadIdx.x) >= d) s_v[slot][threadIdx.x] = 0.0f;
  }
  const int64_t T = a.out.rows;
  float o_last = 0.0f;  // codes out (one token): this thread's o, when warp 0 writes one
  const auto stage = [&](int64_t t) {
    if (t < T) {
      const int slot = static_cast<int>(t % kStages);
      stage_token<kCols>(a, d, t, h, kh, col0, s_q[slot], s_k[slot], s_v[slot], &s_g[slot],
                         &s_b[slot]);
    }
    __pipeline_commit();  // one group per token, empty past T, so the wait count stays exact
  };

  for (int64_t t = 0; t < kStages - 1; ++t) stage(t);
  for (int64_t t = 0; t < T; ++t) {
    const int slot = static_cast<int>(t % kStages);
    // Groups for tokens up to t + kStages − 2 are committed: all but the newest kStages − 2
    // complete means this thread's copies for token t have landed.
    __pipeline_wait_prior(kStages - 2);
    // B1: every thread's copies for token t are visible; every thread is done with token
    // t − 1, whose slot (refilled next) and reduction partials may now be overwritten.
    __syncthreads();
    stage(t + kStages - 1);

    // Fused gating: the Sigmoid, AddVec, Softplus and MulVec kernels' arithmetic, in order.
    float g = s_g[slot], beta = s_b[slot];
    if (gating) {
      beta = detail::sigmoid(beta);
      g = __fmul_rn(detail::softplus(__fadd_rn(g, dt_bias)), ssm_a);
    }
    const float decay = expf(g);
    // Fused L2 norm: the scales l2_norm would apply to this token's q and k heads (every
    // warp computes them from the staged raw values; read as __fmul_rn(x, scale) below).
    const float* sq = s_q[slot];
    const float* sk = s_k[slot];
    float q_norm = 1.0f, k_norm = 1.0f;
    if constexpr (kL2) {
      q_norm = norm::l2_scale(norm::head_sum_squares<kD>(sq, d), a.l2_eps);
      k_norm = norm::l2_scale(norm::head_sum_squares<kD>(sk, d), a.l2_eps);
    }
    const auto key = [&](int i) { return kL2 ? __fmul_rn(sk[i], k_norm) : sk[i]; };
    const auto query = [&](int i) { return kL2 ? __fmul_rn(sq[i], q_norm) : sq[i]; };

    float kS = 0.0f, qS = 0.0f, kq = 0.0f;
    // key(i) of this thread's rows, kept for the update below where the registers allow (at
    // most 8 rows: the 64-register kernels); more rows reload it (with 32, keeping them took
    // <32, 32> from 127 to 153-167 registers, one CTA an SM instead of two).
    constexpr bool kKeepKeys = kRows <= 8;
    float kr[kRows];
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const int i = grp + kGroups * m;
      kr[m] = 0.0f;
      if (kFull || i < d) {
        const float qi = query(i);
        kr[m] = key(i);
        s[m] *= decay;
        kS = fmaf(s[m], kr[m], kS);
        qS = fmaf(s[m], qi, qS);
        kq = fmaf(kr[m], qi, kq);
      }
    }
#pragma unroll
    for (int o = kCols; o < 32; o <<= 1) {  // row groups of this warp sharing column c
      kS += __shfl_xor_sync(detail::kFullMask, kS, o);
      qS += __shfl_xor_sync(detail::kFullMask, qS, o);
      kq += __shfl_xor_sync(detail::kFullMask, kq, o);
    }
    if (lane < kCols) {
      s_red[0][warp][c] = kS;
      s_red[1][warp][c] = qS;
      s_red[2][warp][c] = kq;
    }
    __syncthreads();  // B2: every warp's partial sums are visible before they are added

    float kv = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) kv += s_red[0][w][c];
    const float delta = beta * (s_v[slot][c] - kv);
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const int i = grp + kGroups * m;
      if (kFull || i < d) s[m] = fmaf(kKeepKeys ? kr[m] : key(i), delta, s[m]);
    }
    if (warp == 0 && lane < kCols && col_ok) {  // only o needs S·q and k·q: summed here alone
      float qv = 0.0f, kk = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        qv += s_red[1][w][c];
        kk += s_red[2][w][c];
      }
      o_last = fmaf(delta, kk, qv) * a.q_scale;
      row_ptr(a.out, t)[int64_t(h) * d + j] = o_last;
    }
  }

  if (codes) send_codes_output(warp == 0 && lane < kCols && col_ok, j, o_last, s_head, &s_head_bar);
  state::dispatch(a.out_type, [&](auto st) {
    store_state<decltype(st), kRows, kGroups, kFull>(s, a.state_out, h, d, grp, j, col_ok);
  });
  if (first_cta && warp == 0) quantise_head(a, h, s_head, &s_head_bar);
}

// Picks the smallest instantiated kRows (4, 8, 16, 32) that covers the key dim.
template <int kCols, int kRows>
void launch_rows(const GdnArgs& a, bool l2, int rows_needed, dim3 grid, cudaStream_t s) {
  constexpr int kGroups = kWarps * 32 / kCols;
  if constexpr (kRows * kGroups < kMaxD) {
    if (rows_needed > kRows) return launch_rows<kCols, kRows * 2>(a, l2, rows_needed, grid, s);
  }
  const unsigned cluster = a.codes.act != nullptr ? grid.x : 0;  // codes out: a head's CTAs
  const auto launch = [&](auto kernel) {
    detail::launch_clusters(kernel, grid, kThreads, 0, true, cluster, s, a);
  };
  constexpr int kTileRows = kRows * kGroups;
  if constexpr (kTileRows == kConstantD) {
    if (a.d == kTileRows) {
      l2 ? launch(&gdn_kernel<kCols, kRows, true, kTileRows>)
         : launch(&gdn_kernel<kCols, kRows, false, kTileRows>);
      return;
    }
  }
  l2 ? launch(&gdn_kernel<kCols, kRows, true, 0>) : launch(&gdn_kernel<kCols, kRows, false, 0>);
}

template <int kCols>
void launch_cols(const GdnArgs& a, bool l2, int n_v_heads, cudaStream_t s) {
  constexpr int kGroups = kWarps * 32 / kCols;
  const dim3 grid(detail::ceil_div(a.d, kCols), static_cast<unsigned>(n_v_heads));
  launch_rows<kCols, 4>(a, l2, static_cast<int>(detail::ceil_div(a.d, kGroups)), grid, s);
}

// Value columns per CTA: the widest slice that still gives every SM two CTAs (more, smaller
// CTAs balance the state's bytes across SMs; below that the narrowest slice gives the most
// CTAs). The reduction order depends on it, so every launch of a shape uses the same. Bonsai
// forced to 32 columns (4-CTA clusters a head, half the CTAs): the recurrence 6.16 -> 5.98 µs
// but ssm_out after it 5.00 -> 5.25, tg128 -0.5% (H100, 2026-12-06).
int cols_per_cta(int64_t n_v_heads, int64_t d) {
  const int64_t min_ctas = 2 * int64_t(sm_count());
  if (n_v_heads * detail::ceil_div(d, 32) >= min_ctas) return 32;
  if (n_v_heads * detail::ceil_div(d, 16) >= min_ctas) return 16;
  return 8;
}

}  // namespace

bool gdn_codes_out_ok(int64_t n_v_heads, int64_t d) {
  return d == kCodesD && detail::ceil_div(d, cols_per_cta(n_v_heads, d)) <= kMaxClusterCtas;
}

void gdn_recurrence(DevRows q, DevRows k, DevRows v, DevRows g, DevRows beta, DevRows out,
                    DevState state_in, DevState state_out, int64_t n_k_heads, int64_t n_v_heads,
                    int64_t d, const GdnFusion& fusion, cudaStream_t s) {
  const char* op = "gdn_recurrence";
  const DevRows* views[] = {&q, &k, &v, &g, &beta, &out};
  const char* names[] = {"q", "k", "v", "g", "beta", "out"};
  for (int i = 0; i < 6; ++i) {
    detail::check_view(op, names[i], *views[i]);
    if (views[i]->rows != out.rows) {
      fail("cuda {}: {} has {} rows, out {}", op, names[i], views[i]->rows, out.rows);
    }
  }
  if (d < 1 || d > kMaxD || n_k_heads < 1 || n_v_heads < 1 || n_v_heads % n_k_heads != 0 ||
      n_v_heads > detail::kMaxGridY || q.cols != n_k_heads * d || k.cols != n_k_heads * d ||
      v.cols != n_v_heads * d || out.cols != n_v_heads * d || g.cols != n_v_heads ||
      beta.cols != n_v_heads) {
    fail(
        "cuda {}: Hk {} Hv {} d {} (d <= {}, Hv a multiple of Hk) with q [{}x{}] k [{}x{}] "
        "v [{}x{}] g [{}x{}] beta [{}x{}] out [{}x{}]",
        op, n_k_heads, n_v_heads, d, kMaxD, q.rows, q.cols, k.rows, k.cols, v.rows, v.cols, g.rows,
        g.cols, beta.rows, beta.cols, out.rows, out.cols);
  }
  // The state: [Hv][d][d] in each buffer's storage type; one buffer of one type (in place)
  // or two that do not overlap.
  const size_t in_bytes = model::state_type_bytes(state_in.type);
  const size_t out_bytes = model::state_type_bytes(state_out.type);
  const size_t n_state = size_t(n_v_heads * d * d);
  if (state_in.data == nullptr || state_out.data == nullptr || in_bytes == 0 || out_bytes == 0) {
    fail(
        "cuda {}: Hv {} d {}: state_in {} ({}) and state_out {} ({}) must be set, of type f32, "
        "f16 or bf16",
        op, n_v_heads, d, state_in.data, int(state_in.type), state_out.data, int(state_out.type));
  }
  const bool in_place = state_in.data == state_out.data && state_in.type == state_out.type;
  const char* in_lo = static_cast<const char*>(state_in.data);
  const char* out_lo = static_cast<const char*>(state_out.data);
  if (!in_place && in_lo < out_lo + n_state * out_bytes && out_lo < in_lo + n_state * in_bytes) {
    fail(
        "cuda {}: Hv {} d {}: state_in ({}) and state_out ({}) overlap without being one buffer "
        "of one type",
        op, n_v_heads, d, model::state_type_name(state_in.type),
        model::state_type_name(state_out.type));
  }
  if ((fusion.dt_bias == nullptr) != (fusion.ssm_a == nullptr)) {
    fail("cuda {}: Hv {}: fused gating needs both dt_bias and ssm_a (got {} and {})", op, n_v_heads,
         static_cast<const void*>(fusion.dt_bias), static_cast<const void*>(fusion.ssm_a));
  }
  if (fusion.l2norm && !(fusion.l2_eps >= 0.0f)) {
    fail("cuda {}: Hk {} d {}: fused L2 norm eps {} must be >= 0", op, n_k_heads, d, fusion.l2_eps);
  }
  const CodesOut& c = fusion.codes;
  if (c.act != nullptr && (!gdn_codes_out_ok(n_v_heads, d) || out.rows != 1 || c.meta == nullptr ||
                           c.gate == nullptr || c.norm == nullptr || !(c.eps >= 0.0f))) {
    fail(
        "cuda {}: codes out need one token (got {}), d = {} on at most {} CTAs a head (Hv {} d "
        "{}), meta, gate and norm set and eps >= 0 (got {})",
        op, out.rows, kCodesD, kMaxClusterCtas, n_v_heads, d, c.eps);
  }
  const GdnArgs a{q,
                  k,
                  v,
                  g,
                  beta,
                  out,
                  state_in.data,
                  state_out.data,
                  state_in.type,
                  state_out.type,
                  state_in.settled,
                  fusion.dt_bias,
                  fusion.ssm_a,
                  static_cast<int>(n_k_heads),
                  static_cast<int>(d),
                  static_cast<float>(1.0 / std::sqrt(double(d))),
                  fusion.l2_eps,
                  fusion.codes};
  const int hv = static_cast<int>(n_v_heads);
  switch (cols_per_cta(n_v_heads, d)) {
    case 32:
      launch_cols<32>(a, fusion.l2norm, hv, s);
      break;
    case 16:
      launch_cols<16>(a, fusion.l2norm, hv, s);
      break;
    default:
      launch_cols<8>(a, fusion.l2norm, hv, s);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace gdn::cuda
