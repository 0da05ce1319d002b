#include "cuda/timeline.h"

#include <cstddef>
#include <mutex>

#include "common/error.h"
#include "cuda/check.h"

namespace gdn::cuda {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<TimelineSetter> setters;
  bool armed = false;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

bool register_timeline_setter(TimelineSetter set) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.setters.push_back(set);
  return true;
}

Timeline::Timeline(unsigned cap)
    : buf_(offsetof(TimelineBuffer, stamp) + sizeof(unsigned long long) * cap), cap_(cap) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.armed) fail("timeline: another timeline is armed");
  const unsigned header[2] = {0u, cap};
  CUDA_CHECK(cudaMemcpy(buf_.get(), header, sizeof header, cudaMemcpyHostToDevice));
  try {
    for (TimelineSetter set : r.setters) CUDA_CHECK(set(buf_.as<TimelineBuffer>()));
  } catch (...) {
    for (TimelineSetter set : r.setters) set(nullptr);
    throw;
  }
  r.armed = true;
}

Timeline::~Timeline() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  cudaDeviceSynchronize();  // no kernel may still stamp into the buffer being freed
  for (TimelineSetter set : r.setters) set(nullptr);  // a destructor must not throw
  r.armed = false;
}

std::vector<uint64_t> Timeline::stamps() const {
  CUDA_CHECK(cudaDeviceSynchronize());
  unsigned count = 0;
  CUDA_CHECK(cudaMemcpy(&count, buf_.get(), sizeof count, cudaMemcpyDeviceToHost));
  if (count > cap_) fail("timeline: {} kernels stamped, the buffer holds {}", count, cap_);
  std::vector<uint64_t> t(count);
  CUDA_CHECK(cudaMemcpy(t.data(), buf_.as<unsigned char>() + offsetof(TimelineBuffer, stamp),
                        sizeof(uint64_t) * count, cudaMemcpyDeviceToHost));
  return t;
}

}  // namespace gdn::cuda
