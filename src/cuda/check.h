// Error checking for every CUDA call and launch: file, line and CUDA's own message,
// thrown as gdn::Error so a failing kernel never goes unnoticed.
#pragma once

#include <cuda_runtime.h>

#include "common/error.h"

#define CUDA_CHECK(call)                                                                 \
  do {                                                                                   \
    const cudaError_t err_ = (call);                                                     \
    if (err_ != cudaSuccess) {                                                           \
      ::gdn::fail("CUDA error {} ({}) at {}:{}: {}", static_cast<int>(err_),             \
                  cudaGetErrorName(err_), __FILE__, __LINE__, cudaGetErrorString(err_)); \
    }                                                                                    \
  } while (0)

// After a kernel launch: catches bad launch configurations at once.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
