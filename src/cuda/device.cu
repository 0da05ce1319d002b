#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "common/error.h"
#include "cuda/check.h"
#include "cuda/device.h"

namespace gdn::cuda {

bool available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::string describe_device() {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  return fmt::format("{}, {} SMs, {} MB L2, {:.0f} GiB, sm_{}{}", p.name, p.multiProcessorCount,
                     p.l2CacheSize >> 20, double(p.totalGlobalMem) / (1ull << 30), p.major,
                     p.minor);
}

int sm_count() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];  // static storage: zero-initialised
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  int n = dev >= 0 && dev < kMaxDevices ? cache[dev].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    if (dev >= 0 && dev < kMaxDevices) cache[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

double median_event_us(cudaStream_t s, int warmups, int runs, const std::function<void()>& run,
                       const std::function<void()>& prepare) {
  if (runs < 1) fail("median_event_us: {} runs (at least 1)", runs);
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> us;
  for (int r = 0; r < warmups + runs; ++r) {
    if (prepare) prepare();
    CUDA_CHECK(cudaEventRecord(start, s));
    run();
    CUDA_CHECK(cudaEventRecord(stop, s));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r >= warmups) us.push_back(1e3 * ms);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

double measure_copy_bandwidth(cudaStream_t s) {
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer a(bytes), b(bytes);
  CUDA_CHECK(cudaMemsetAsync(a.get(), 1, bytes, s));
  // The first copies warm up clocks and TLBs.
  const double us = median_event_us(s, 2, 6, [&] {
    CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s));
  });
  return 2.0 * double(bytes) / (us * 1e-6);
}

template <Memory M>
Buffer<M>::Buffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  if constexpr (M == Memory::Device) {
    CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  } else {
    CUDA_CHECK(cudaMallocHost(&ptr_, bytes));
  }
}

template <Memory M>
void Buffer<M>::release() {
  if (!ptr_) return;
  if constexpr (M == Memory::Device) {
    cudaFree(ptr_);
  } else {
    cudaFreeHost(ptr_);
  }
}

template <Memory M>
Buffer<M>::~Buffer() {
  release();
}

template <Memory M>
Buffer<M>::Buffer(Buffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

template <Memory M>
Buffer<M>& Buffer<M>::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void* device_address(const PinnedBuffer& b) {
  void* d = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&d, b.get(), 0));
  return d;
}

template class Buffer<Memory::Device>;
template class Buffer<Memory::PinnedHost>;

}  // namespace gdn::cuda
