// Norms: rms_norm (x·rsqrt(mean(x²) + eps)·w) and l2_norm (x·rsqrt(Σx² + eps)), per chunk of
// a row (a head of 64–256 floats, or a whole 5120-float row).
//
// Design: one CTA per (row, chunk) of norm::norm_threads(chunk) threads (a warp per 256
// floats, at most 1024). The squares are added in the canonical order of norm.cuh — the order
// the fused kernels (GDN q/k norm, GEMV prologues) reproduce — with every thread's loads of a
// tile in flight at once; the scaling pass re-reads x from L1. Each element is read before any
// is written (the barrier separates the passes), so y may alias x (the decode program
// normalises q, k and o in place).
//
// Loads are 4-byte and coalesced rather than 16-byte: views start at any column (per-head
// chunks of a wider buffer), and a decode row is 20 KB, so latency, not bandwidth, bounds
// this kernel. Measured (H200, 2026-11-30, gdn ops --perf, before the order moved to
// norm.cuh): a 5120 row 2.6 µs, Bonsai's 48-head ssm_norm 1.8 µs (54% and 92% of the
// same-size read ceiling).
//
// Precision: the CPU sums the squares in double. Here each thread's ~chunk/threads squares
// and the log2(threads) levels of the tree round in f32: relative error of the sum at most
// about (chunk/threads + log2(threads) + 1)·2^-24 ≈ 1e-6 for a 5120 row on 640 threads
// (typically far less: the errors of a sum of positive terms do not cancel but are not all
// worst-case either). The scale rsqrt(·) halves that and adds about an ulp of its own
// (norm::rsqrt_refined, f32; the CPU computes it in double). Outputs: ~1e-6 relative, and the
// op check allows 4e-6.
#include <algorithm>

#include "cuda/norm.cuh"

namespace gdn::cuda {
namespace {

using detail::row_ptr;

template <bool kRms>
__global__ void __launch_bounds__(norm::kMaxNormThreads)
    norm_kernel(DevRows x, DevRows y, const float* __restrict__ w, int chunk, int n_chunks,
                float eps) {
  __shared__ float sums[norm::kMaxNormThreads / 32];
  detail::pdl_enter();
  const int64_t r = blockIdx.x / n_chunks;
  const int c0 = (blockIdx.x % n_chunks) * chunk;
  const float* xr = row_ptr(x, r) + c0;
  float* yr = row_ptr(y, r) + c0;
  const int warp = threadIdx.x >> 5;
  const float ws = norm::virtual_warp_sum_squares(xr, chunk, warp);
  if ((threadIdx.x & 31) == 0) sums[warp] = ws;
  __syncthreads();  // every warp's sum (and so every read of x) precedes any write of y
  const float total = norm::combine_warp_sums(sums, blockDim.x >> 5);
  const float scale = kRms ? norm::rms_scale(total, chunk, eps) : norm::l2_scale(total, eps);
  for (int i = threadIdx.x; i < chunk; i += blockDim.x) {
    yr[i] = kRms ? xr[i] * scale * w[i] : xr[i] * scale;  // (x·scale)·w, the CPU's order
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
  if (chunk > INT32_MAX / 2) fail("cuda {}: chunk {} too large", op, chunk);
  const int threads = norm::norm_threads(static_cast<int>(chunk));
  const auto kernel = rms ? norm_kernel<true> : norm_kernel<false>;
  detail::launch(kernel, static_cast<unsigned>(blocks), threads, 0, true, s, x, y, w,
                 static_cast<int>(chunk), static_cast<int>(n_chunks), eps);
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
