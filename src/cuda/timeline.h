// The dispatch timeline: one globaltimer stamp per kernel, taken by thread 0 of CTA 0 as its
// pdl_wait() returns (kernel_util.cuh), in the order the kernels ran. Stamp i+1 minus stamp i
// is kernel i's share of the stream's time once its predecessor finished: its work after the
// wait plus the hand-over to the next kernel. gdn bench --timeline attributes a decode token's
// time to the program's steps with it.
//
// C++17-clean: included from kernel_util.cuh.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/device.h"

namespace gdn::cuda {

// Device-side record: `count` stamps were taken, the first `cap` of them stored.
struct TimelineBuffer {
  unsigned int count;
  unsigned int cap;
  unsigned long long stamp[1];  // really [cap]
};

// Each .cu file that launches kernels holds its own pointer to the armed buffer (see
// kernel_util.cuh) and registers a setter for it at static initialisation.
using TimelineSetter = cudaError_t (*)(TimelineBuffer*);
bool register_timeline_setter(TimelineSetter set);

// Arms every kernel for as long as it lives (one at a time; the constructor fails if another
// is armed). Synchronous: arm before the work is enqueued, read after it finished.
class Timeline {
 public:
  explicit Timeline(unsigned cap);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // The stamps so far, in ns; fails when more kernels stamped than the buffer holds.
  std::vector<uint64_t> stamps() const;

 private:
  DeviceBuffer buf_;
  unsigned cap_;
};

}  // namespace gdn::cuda
