// Checks every backend's executor must pass, shared by the CPU and CUDA test suites.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/executor.h"

namespace gdn::testing {

// forward_view hands out the logits forward copies (every id's, then one more token's), and
// the next forward replaces them. `copied` and `viewed` run the same model from empty slots 0.
inline void expect_view_holds_what_forward_copies(runtime::Executor& copied,
                                                  runtime::Executor& viewed,
                                                  std::span<const int32_t> ids, int64_t n_vocab) {
  std::vector<float> all, last;
  copied.forward(ids, 0, true, all);
  std::span<const float> v = viewed.forward_view(ids, 0, true);
  EXPECT_TRUE(std::equal(v.begin(), v.end(), all.begin(), all.end()));
  const int32_t next = 42;
  copied.forward(std::span<const int32_t>(&next, 1), 0, false, last);
  v = viewed.forward_view(std::span<const int32_t>(&next, 1), 0, false);
  ASSERT_EQ(v.size(), size_t(n_vocab));
  EXPECT_TRUE(std::equal(v.begin(), v.end(), last.begin(), last.end()));
}

}  // namespace gdn::testing
