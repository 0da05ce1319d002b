// Device discovery and owned device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <string>

namespace gdn::cuda {

// True when a CUDA device can be used (driver present, at least one GPU).
bool available();
// "NVIDIA H200, 132 SMs, 60 MB L2, 139 GiB" — for logs and benchmark tables.
std::string describe_device();

// The current device's multiprocessor count, read once per device (launch shapes adapt to
// it; no SM count is hard-coded). Safe during stream capture: it is not a stream operation.
int sm_count();

// Median microseconds of `run` on stream s, timed by events around it, over `runs` runs after
// `warmups` untimed ones; `prepare` (may be empty) runs before each, outside the timed span.
// Both must only enqueue work on s.
double median_event_us(cudaStream_t s, int warmups, int runs, const std::function<void()>& run,
                       const std::function<void()>& prepare = {});

// Device-to-device copy bandwidth in bytes/s, read + write counted (1 GiB copies, median):
// the roofline every speed is reported against.
double measure_copy_bandwidth(cudaStream_t s);

// Where an owned allocation lives: device memory (cudaMalloc) or pinned host memory
// (cudaMallocHost: device-to-host copies into it run at link speed, with no staging through a
// driver buffer and no second host copy).
enum class Memory { Device, PinnedHost };

// Owned allocation, moved never copied.
template <Memory M>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void release();
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};
using DeviceBuffer = Buffer<Memory::Device>;
using PinnedBuffer = Buffer<Memory::PinnedHost>;

// The address under which kernels reach pinned host memory (cudaMallocHost memory is mapped
// into every device's address space): a kernel may store into it directly, over the link,
// while it runs.
void* device_address(const PinnedBuffer& b);

}  // namespace gdn::cuda
