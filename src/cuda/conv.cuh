// The GDN conv's per-channel arithmetic, shared by the conv kernel (conv.cu) and the fused
// GEMV's conv epilogue (matmul.cuh, Epilogue::ConvSilu): the fused epilogue equals the conv
// kernel bit for bit only if it adds the same products in the same order, written once here.
//
// Order (the CPU reference's, cpu/ops.cpp): the current tap times the current input first,
// then the history oldest first, each product exact in double, the sum rounded to f32 once.
#pragma once

#include "cuda/kernel_util.cuh"

namespace gdn::cuda::conv {

// The conv of one channel for one token: w_cur · x + sum_j<hist wh[j] · h[j] (h oldest
// first). N is the register arrays' size (the callers' largest history); only j < hist count.
template <int N>
__device__ __forceinline__ float channel_sum(float w_cur, float x, const float (&wh)[N],
                                             const float (&h)[N], int hist) {
  double acc = double(w_cur) * double(x);
#pragma unroll
  for (int j = 0; j < N; ++j) {
    if (j < hist) acc += double(wh[j]) * double(h[j]);
  }
  return static_cast<float>(acc);
}

}  // namespace gdn::cuda::conv
