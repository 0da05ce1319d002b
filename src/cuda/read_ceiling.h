// Timing on the GPU shared by `gdn ops --perf` and bench/gemv_lab: graph-replayed launches,
// and the same-size streaming-read ceiling a small kernel is judged against.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <string>

namespace gdn::cuda {

// Median microseconds per launch of launch(0..launches-1) captured into one CUDA graph and
// replayed `replays` times after warm-up (host launch cost excluded, as in the executor's
// graphs). `launch` must only enqueue kernels on s.
double graph_us(cudaStream_t s, const std::function<void(int)>& launch, int launches, int replays);

struct ReadCeiling {
  double us = 0;       // per read, timed like graph_us
  std::string config;  // "CTAs per SM x threads" of the best plain read kernel
};
// The best plain streaming read of `bytes` over a few launch shapes, with the buffer rotated
// among copies beyond L2.
ReadCeiling measure_read_ceiling(double bytes, cudaStream_t s);

}  // namespace gdn::cuda
