// The attention layer's position-dependent kernels: rope (NeoX, in place) and causal GQA
// softmax attention against the slot's KV cache (decode, T = 1, and prefill, T > 1).
//
// rope — one CTA per row (token). Its threads first build the row's cos/sin table for the
// n_rot/2 frequencies in shared memory, in double: angle = pos·θ^(−2i/n_rot) with pos up to
// ~10^5 needs more than f32 (an f32 angle near 10^5 rad is off by up to 4e-3 rad), and the
// CPU computes it in double too. A barrier, then one thread per (head, pair) rotates
// (x_i, x_{i+n_rot/2}) in double and rounds once; a second barrier before the next row
// rewrites the table. CUDA's double pow/sin/cos are within 2 ulp, so the results match the
// CPU's to the last f32 bit except where a double rounds across an f32 boundary (1 ulp).
//
// attention — one CTA per (query row t, head h), 8 warps. The n_kv = pos0 + t + 1 keys are
// dealt to the warps in batches of 4 consecutive keys (warp w takes keys 4w.., 4w + 32.., …),
// and each warp runs its own online softmax (running max m, sum l, accumulator o over the head
// dim spread across its lanes, D/32 per lane) with no barrier in the key loop. Per batch a
// lane loads its D/32 dims of the 4 K rows and 4 V rows up front (coalesced: lanes read
// consecutive floats of a row), forms the 4 dot products with warp butterflies, then rescales
// and accumulates. At the end the 8 warps' (m, l, o) are merged through shared memory after
// one barrier, in warp order (deterministic), and out = o / l. GQA: query head h reads kv
// head h / (H / Hkv); the heads sharing a kv head read the same rows, mostly from L2.
//
// Decode runs H CTAs (24 for Bonsai): fine for the short contexts the op check and the
// baseline use; long contexts want the keys split over more CTAs (flash-decoding) with a
// merge step — not done yet.
//
// Precision vs the CPU (double throughout): a score's dot rounds over D/32 terms per lane and
// 5 butterfly levels (error ≲ 13·2^-24·Σ|q_i k_i|/√D, which exp turns into a relative error
// of the weight); the accumulators round once per key of the warp's share and once per merge.
// The op check allows 2e-5 of max|out| (see checks_ops.cpp).
#include <cmath>

#include "cuda/kernel_util.cuh"

namespace gdn::cuda {
namespace {

using detail::row_ptr;

// ---------------------------------------------------------------------------------------------
// rope

constexpr int kRopeThreads = 256;
constexpr int64_t kMaxRot = 1024;  // the table: n_rot doubles of shared memory

__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(DevRows x, int head_dim, int n_rot, int n_head, float theta, int64_t pos0) {
  extern __shared__ double s_table[];  // [half] cos, then [half] sin
  const int half = n_rot / 2;
  for (int64_t t = blockIdx.x; t < x.rows; t += gridDim.x) {
    const double pos = double(pos0 + t);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      const double angle = pos * pow(double(theta), -2.0 * double(i) / double(n_rot));
      double sn, cs;
      sincos(angle, &sn, &cs);
      s_table[i] = cs;
      s_table[half + i] = sn;
    }
    __syncthreads();  // the row's cos/sin table is complete before any rotation reads it
    float* xr = row_ptr(x, t);
    for (int p = threadIdx.x; p < n_head * half; p += blockDim.x) {
      const int h = p / half, i = p - h * half;
      float* xh = xr + int64_t(h) * head_dim;
      const double a = xh[i], b = xh[i + half], c = s_table[i], s = s_table[half + i];
      xh[i] = static_cast<float>(a * c - b * s);
      xh[i + half] = static_cast<float>(a * s + b * c);
    }
    __syncthreads();  // every rotation has read the table before the next row rewrites it
  }
}

// ---------------------------------------------------------------------------------------------
// attention

constexpr int kAttnWarps = 8;
constexpr int kAttnThreads = kAttnWarps * 32;
constexpr int kBatch = 4;  // keys per warp per iteration: 4 independent dots in flight
constexpr int kMaxHeadDim = 256;

struct AttnArgs {
  DevRows q, out;
  const float* k_cache;
  const float* v_cache;
  int n_head, group, head_dim, kv_dim;
  int64_t pos0;
  float scale;  // 1/√D
};

// kDims: head-dim elements per lane (D ≤ 32·kDims); dim i of a row lives on lane i % 32,
// slot i / 32.
template <int kDims>
__global__ void __launch_bounds__(kAttnThreads) attention_kernel(AttnArgs a) {
  __shared__ float s_m[kAttnWarps], s_l[kAttnWarps], s_o[kAttnWarps][32 * kDims];

  const int64_t t = blockIdx.x / a.n_head;
  const int h = static_cast<int>(blockIdx.x % a.n_head), kvh = h / a.group;
  const int D = a.head_dim;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n_kv = a.pos0 + t + 1;  // causal: positions 0 .. pos0 + t

  const float* qh = row_ptr(a.q, t) + int64_t(h) * D;
  float qr[kDims], o[kDims];
#pragma unroll
  for (int m = 0; m < kDims; ++m) {
    const int i = lane + 32 * m;
    qr[m] = i < D ? qh[i] : 0.0f;
    o[m] = 0.0f;
  }
  const float* kb = a.k_cache + int64_t(kvh) * D;
  const float* vb = a.v_cache + int64_t(kvh) * D;

  float m_run = -INFINITY, l_run = 0.0f;
  for (int64_t s0 = int64_t(warp) * kBatch; s0 < n_kv; s0 += kAttnWarps * kBatch) {
    float sc[kBatch], vv[kBatch][kDims];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t s = s0 + b;
      const float* kr = kb + s * a.kv_dim;
      const float* vr = vb + s * a.kv_dim;
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
  __syncthreads();  // every warp's (max, sum, accumulator) is visible before the merge

  // Warp 0 always holds key 0, so M is finite; a warp that got no key has m = −inf, l = 0,
  // o = 0 and weight exp(−inf) = 0.
  float M = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, s_m[w]);
  float* oh = row_ptr(a.out, t) + int64_t(h) * D;
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    float L = 0.0f, acc = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) {
      const float f = expf(s_m[w] - M);
      L = fmaf(s_l[w], f, L);
      acc = fmaf(s_o[w][i], f, acc);
    }
    oh[i] = acc / L;
  }
}

template <int kDims>
void launch_attention(const AttnArgs& a, int64_t rows, cudaStream_t s) {
  if constexpr (kDims < kMaxHeadDim / 32) {
    if (a.head_dim > 32 * kDims) return launch_attention<kDims * 2>(a, rows, s);
  }
  attention_kernel<kDims><<<static_cast<unsigned>(rows * a.n_head), kAttnThreads, 0, s>>>(a);
}

}  // namespace

void rope(DevRows x, int64_t head_dim, int64_t n_rot, float theta, int64_t pos0, cudaStream_t s) {
  detail::check_view("rope", "x", x);
  if (head_dim <= 0 || x.cols % head_dim != 0 || n_rot <= 0 || n_rot % 2 != 0 || n_rot > head_dim ||
      n_rot > kMaxRot || pos0 < 0 || !(theta > 0.0f) || x.rows > INT32_MAX) {
    fail("cuda rope: x [{}x{}] head_dim {} n_rot {} (even, <= head_dim, <= {}) theta {} pos0 {}",
         x.rows, x.cols, head_dim, n_rot, kMaxRot, theta, pos0);
  }
  const int n_head = static_cast<int>(x.cols / head_dim);
  rope_kernel<<<static_cast<unsigned>(x.rows), kRopeThreads, n_rot * sizeof(double), s>>>(
      x, static_cast<int>(head_dim), static_cast<int>(n_rot), n_head, theta, pos0);
  CUDA_CHECK_LAUNCH();
}

void attention(DevRows q, const float* k_cache, const float* v_cache, DevRows out, int64_t n_head,
               int64_t n_head_kv, int64_t head_dim, int64_t pos0, cudaStream_t s) {
  detail::check_view("attention", "q", q);
  detail::check_view("attention", "out", out);
  detail::check_same_shape("attention", q, "q", out, "out");
  if (n_head < 1 || n_head_kv < 1 || n_head % n_head_kv != 0 || head_dim < 1 ||
      head_dim > kMaxHeadDim || q.cols != n_head * head_dim || pos0 < 0 || k_cache == nullptr ||
      v_cache == nullptr || q.rows * n_head > INT32_MAX) {
    fail(
        "cuda attention: q, out [{}x{}] with H {} Hkv {} D {} (D <= {}, H a multiple of Hkv) "
        "at position {}",
        q.rows, q.cols, n_head, n_head_kv, head_dim, kMaxHeadDim, pos0);
  }
  const AttnArgs a{q,
                   out,
                   k_cache,
                   v_cache,
                   static_cast<int>(n_head),
                   static_cast<int>(n_head / n_head_kv),
                   static_cast<int>(head_dim),
                   static_cast<int>(n_head_kv * head_dim),
                   pos0,
                   static_cast<float>(1.0 / std::sqrt(double(head_dim)))};
  launch_attention<1>(a, q.rows, s);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gdn::cuda
