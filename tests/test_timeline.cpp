// The dispatch timeline's sum by step kind (gdn bench --timeline), on made-up step times: the
// GPU that produces real ones is tested in test_cuda_backend.
#include <gtest/gtest.h>

#include "runtime/timeline.h"

namespace gdn::runtime {
namespace {

TEST(Timeline, KindsAreSummedOverTokensMostTimeFirst) {
  const std::vector<std::vector<StepTime>> tokens = {
      {{"norm", 1, 2.0}, {"gemv q1_0", 2, 10.0, 1000}, {"norm", 1, 3.0}, {"rope", 1, 1.0}},
      {{"norm", 1, 2.5}, {"gemv q1_0", 2, 11.0, 1000}, {"norm", 1, 3.5}, {"rope", 1, 1.0}},
  };
  const std::vector<KindTime> k = sum_by_kind(tokens);
  ASSERT_EQ(k.size(), 3u);
  EXPECT_EQ(k[0].kind, "gemv q1_0");
  EXPECT_EQ(k[0].steps, 2);
  EXPECT_EQ(k[0].launches, 4);
  EXPECT_DOUBLE_EQ(k[0].us, 21.0);
  EXPECT_EQ(k[0].weight_bytes, 2000u);
  EXPECT_EQ(k[1].kind, "norm");
  EXPECT_EQ(k[1].steps, 4);
  EXPECT_EQ(k[1].launches, 4);
  EXPECT_DOUBLE_EQ(k[1].us, 11.0);
  EXPECT_EQ(k[1].weight_bytes, 0u);
  EXPECT_EQ(k[2].kind, "rope");
  EXPECT_DOUBLE_EQ(k[2].us, 2.0);
}

TEST(Timeline, TiesKeepTheOrderKindsWereSeenIn) {
  const std::vector<KindTime> k = sum_by_kind({{{"b", 1, 1.0}, {"a", 1, 1.0}, {"c", 1, 1.0}}});
  ASSERT_EQ(k.size(), 3u);
  EXPECT_EQ(k[0].kind, "b");
  EXPECT_EQ(k[1].kind, "a");
  EXPECT_EQ(k[2].kind, "c");
  EXPECT_TRUE(sum_by_kind({}).empty());
}

}  // namespace
}  // namespace gdn::runtime
