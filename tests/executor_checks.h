// Checks shared by the CPU and CUDA executor test suites.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/executor.h"

namespace gdn::testing {

// The logits of three forwards read through forward_view, each copied out before the next
// forward: ids but the last, last token only, on slot 1 (a small buffer); all of ids, every
// token, on slot 0 (the buffer grows); then `next`, last token only, on slot 0 (it shrinks).
// Both slots are reset first.
inline std::vector<std::vector<float>> views_through_growth(runtime::Executor& ex,
                                                            std::span<const int32_t> ids,
                                                            int32_t next) {
  ex.reset_slot(0);
  ex.reset_slot(1);
  std::vector<std::vector<float>> out;
  const auto keep = [&](std::span<const float> v) { out.emplace_back(v.begin(), v.end()); };
  keep(ex.forward_view(ids.first(ids.size() - 1), 1, false));
  keep(ex.forward_view(ids, 0, true));
  keep(ex.forward_view(std::span<const int32_t>(&next, 1), 0, false));
  return out;
}

}  // namespace gdn::testing
