// Norms: rms_norm (x·rsqrt(mean(x²) + eps)·w) and l2_norm (x·rsqrt(Σx² + eps)), per chunk of
// a row (a head of 64–256 floats, or a whole 5120-float row).
//
// Design: one CTA per (row, chunk), sized to the chunk: ceil(chunk / 8) threads rounded up to
// a warp, at most 1024. Each thread loads its (up to) 8 elements into registers with all loads
// in flight at once, sums their squares in f32 (fmaf), and the block tree-reduces (warp
// butterflies, then the warp sums added in warp order by every thread: deterministic). The
// scaling pass works from the registers, so x is read once (chunks over 8192 floats re-read
// the earlier tiles). Each element is read before any is written (the reduction's barriers
// separate the passes), so y may alias x (the decode program normalises q, k and o in place).
//
// Loads are 4-byte and coalesced rather than 16-byte: views start at any column (per-head
// chunks of a wider buffer), and a decode row is 20 KB, so latency, not bandwidth, bounds
// this kernel. Measured (H200, 2026-11-30, gdn ops --perf): a 5120 row 2.6 µs, Bonsai's
// 48-head ssm_norm 1.8 µs (54% and 92% of the same-size read ceiling), against 3.8 and 3.0 µs
// with a load-add loop (one latency per element) and w loaded after the reduction.
//
// Precision: the CPU sums the squares in double. Here each thread's ~chunk/threads squares
// and the log2(threads) levels of the tree round in f32: relative error of the sum at most
// about (chunk/threads + log2(threads) + 1)·2^-24 ≈ 1e-6 for a 5120 row on 640 threads
// (typically far less: the errors of a sum of positive terms do not cancel but are not all
// worst-case either). The scale rsqrt(·) halves that; it is computed once per chunk in double,
// as the CPU does, so it adds no error of its own. Outputs: ~1e-6 relative, and the op check
// allows 4e-6.
#include <algorithm>

#include "cuda/kernel_util.cuh"

namespace gdn::cuda {
namespace {

using detail::row_ptr;

constexpr int kMaxNormThreads = 1024;
constexpr int kPerThread = 8;  // elements a thread holds in registers between the two passes

template <bool kRms>
__global__ void __launch_bounds__(kMaxNormThreads)
    norm_kernel(DevRows x, DevRows y, const float* __restrict__ w, int chunk, int n_chunks,
                float eps) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x / n_chunks;
  const int c0 = (blockIdx.x % n_chunks) * chunk;
  const float* xr = row_ptr(x, r) + c0;
  float* yr = row_ptr(y, r) + c0;
  const int tile = kPerThread * blockDim.x;  // the launcher sizes the CTA so one tile is the chunk

  // All of a tile's loads are issued before the first use (a loop of dependent load-add
  // steps would pay the memory latency once per element).
  // The weights are independent of the sum, so they are loaded with x, not after the
  // reduction (which would add one more memory latency).
  float v[kPerThread], wv[kPerThread];
  float ss = 0.0f;
  for (int base = 0; base < chunk; base += tile) {
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      const int i = base + e * blockDim.x + threadIdx.x;
      v[e] = i < chunk ? xr[i] : 0.0f;
      wv[e] = kRms && i < chunk ? w[i] : 0.0f;
    }
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) ss = fmaf(v[e], v[e], ss);
  }
  ss = detail::block_sum(ss, scratch);  // barriers inside: every read of x precedes any write

  const double denom = kRms ? double(ss) / double(chunk) : double(ss);
  const float scale = static_cast<float>(1.0 / sqrt(denom + double(eps)));
  // The last tile is still in registers; earlier ones (chunks over kPerThread·1024) are re-read.
  for (int base = 0; base < chunk; base += tile) {
    const bool in_regs = base + tile >= chunk;
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      const int i = base + e * blockDim.x + threadIdx.x;
      if (i < chunk) {
        const float xv = in_regs ? v[e] : xr[i];
        const float wi = in_regs ? wv[e] : kRms ? w[i] : 0.0f;
        yr[i] = kRms ? xv * scale * wi : xv * scale;  // (x·scale)·w, the CPU's order
      }
    }
  }
}

void launch_norm(const char* op, bool rms, DevRows x, DevRows y, const float* w, int64_t chunk,
                 float eps, cudaStream_t s) {
  detail::check_view(op, "x", x);
  detail::check_view(op, "y", y);
  detail::check_same_shape(op, x, "x", y, "y");
  if (chunk <= 0 || x.cols % chunk != 0) {
    fail("cuda {}: chunk {} must be positive and divide the row of {} columns", op, chunk, x.cols);
  }
  if (rms && w == nullptr) fail("cuda {}: no weight vector", op);
  if (!(eps >= 0.0f)) fail("cuda {}: eps {} must be >= 0", op, eps);
  const int64_t n_chunks = x.cols / chunk, blocks = x.rows * n_chunks;
  if (blocks > INT32_MAX)
    fail("cuda {}: {} rows x {} chunks exceed the grid", op, x.rows, n_chunks);
  const int64_t want = (chunk + kPerThread - 1) / kPerThread;
  const int threads = static_cast<int>(std::min<int64_t>(kMaxNormThreads, (want + 31) / 32 * 32));
  const auto kernel = rms ? norm_kernel<true> : norm_kernel<false>;
  kernel<<<static_cast<unsigned>(blocks), threads, 0, s>>>(x, y, w, static_cast<int>(chunk),
                                                           static_cast<int>(n_chunks), eps);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rms_norm(DevRows x, DevRows y, const float* w, int64_t chunk, float eps, cudaStream_t s) {
  launch_norm("rms_norm", true, x, y, w, chunk, eps, s);
}

void l2_norm(DevRows x, DevRows y, int64_t chunk, float eps, cudaStream_t s) {
  launch_norm("l2_norm", false, x, y, nullptr, chunk, eps, s);
}

}  // namespace gdn::cuda
