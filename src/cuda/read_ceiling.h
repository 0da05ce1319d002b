// A plain streaming-read kernel: the per-size bandwidth ceiling for `gdn ops --perf`.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace gdn::cuda {

// Reads `bytes` (a multiple of 16, 16-byte aligned) from src; sink is a device word the
// kernel may write so the loads cannot be optimised away.
void stream_read(const void* src, size_t bytes, unsigned* sink, int n_sm, cudaStream_t s);

}  // namespace gdn::cuda
