// conv_step: the GDN layer's causal depthwise convolution over the T rows of x, with the
// K-1 previous inputs per channel kept in a state [K-1][C] (oldest first) and advanced in
// place. Tap K-1 multiplies the current row.
//
// Design: one thread per channel, looping over the T tokens inside the launch (prefill is one
// launch, not T). The channel's history and its K weights live in registers for the whole
// launch: the state is read once and written once, the weights read once. Per token the
// thread reads x[t][c] and writes y[t][c]; consecutive threads hold consecutive channels, so
// those accesses (and the state's) are coalesced 128-byte rows. Channels are independent:
// no shared memory, no barriers. The register arrays are indexed only with compile-time
// constants (fully unrolled loops over kMaxKernel with run-time guards), so they stay in
// registers.
//
// Precision: the sum is accumulated in double in the CPU's order (current tap first, then the
// history oldest first) and rounded to f32 once. A product of two floats is exact in double,
// so each step (fused or not) rounds exactly as the CPU's does: the result is the CPU's bit
// for bit. It costs nothing measurable — the kernel moves bytes, K double FMAs per element.
// y may alias x exactly: column c of every row is read and written by one thread only, each
// element read before it is written.
#include "cuda/kernel_util.cuh"

namespace gdn::cuda {
namespace {

using detail::row_ptr;

constexpr int kConvThreads = 128;
constexpr int kMaxKernel = 8;  // the model uses 4

__global__ void __launch_bounds__(kConvThreads)
    conv_kernel(DevRows x, DevRows y, const float* __restrict__ w, int kernel,
                float* __restrict__ state) {
  const int64_t C = x.cols;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int hist = kernel - 1;
  const float* wc = w + c * kernel;
  const float w_cur = wc[hist];
  float h[kMaxKernel - 1], wh[kMaxKernel - 1];
#pragma unroll
  for (int j = 0; j < kMaxKernel - 1; ++j) {
    h[j] = j < hist ? state[j * C + c] : 0.0f;
    wh[j] = j < hist ? wc[j] : 0.0f;
  }
  for (int64_t t = 0; t < x.rows; ++t) {
    const float xv = row_ptr(x, t)[c];
    double acc = double(w_cur) * double(xv);
#pragma unroll
    for (int j = 0; j < kMaxKernel - 1; ++j) {
      if (j < hist) acc += double(wh[j]) * double(h[j]);
    }
    // Shift the history: the current input becomes the newest entry.
#pragma unroll
    for (int j = 0; j < kMaxKernel - 1; ++j) {
      if (j + 1 < hist) h[j] = h[j + 1];
      if (j == hist - 1) h[j] = xv;
    }
    row_ptr(y, t)[c] = static_cast<float>(acc);
  }
#pragma unroll
  for (int j = 0; j < kMaxKernel - 1; ++j) {
    if (j < hist) state[j * C + c] = h[j];
  }
}

}  // namespace

void conv_step(DevRows x, DevRows y, const float* w, int64_t kernel, float* state, cudaStream_t s) {
  detail::check_view("conv_step", "x", x);
  detail::check_view("conv_step", "y", y);
  detail::check_same_shape("conv_step", x, "x", y, "y");
  if (kernel < 1 || kernel > kMaxKernel || w == nullptr || (kernel > 1 && state == nullptr)) {
    fail(
        "cuda conv_step: kernel size {} over {} channels (supported 1..{}, weights and state "
        "required)",
        kernel, x.cols, kMaxKernel);
  }
  conv_kernel<<<detail::ceil_div(x.cols, kConvThreads), kConvThreads, 0, s>>>(
      x, y, w, static_cast<int>(kernel), state);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gdn::cuda
