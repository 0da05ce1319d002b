// The host-side rules that fix a one-token product's summation order (q1_dot.cuh's q1_cut,
// matmul.cuh's chunk_ranges). They need no GPU, so CI runs them; the GPU op checks then prove
// every kernel follows them bit for bit.
#include <gtest/gtest.h>

#include "cuda/matmul.cuh"
#include "cuda/q1_dot.cuh"

namespace gdn::cuda::mm {
namespace {

TEST(Q1Cut, BonsaiRowsAsDocumented) {
  // kQ = 2 (a chunk is 2 quads of 512 inputs): 5120 -> 5 warps of one chunk, 6144 -> 6 of one,
  // 17408 -> 6 of three.
  const struct {
    int64_t n_in;
    int slices, chunks;
  } cases[] = {{5120, 5, 1}, {6144, 6, 1}, {17408, 6, 3}};
  for (const auto& c : cases) {
    const Q1Cut cut = q1_cut(2, c.n_in / (kBlock * kQuadBlocks));
    EXPECT_EQ(cut.slices, c.slices) << c.n_in;
    EXPECT_EQ(cut.chunks, c.chunks) << c.n_in;
  }
}

TEST(Q1Cut, CoversEveryQuadInTheFewestChunks) {
  for (int kQ : {2, 4}) {
    EXPECT_LE(cut_slices(kQ), max_slices(kQ));
    for (int64_t quads = 1; quads <= 200; ++quads) {
      const Q1Cut cut = q1_cut(kQ, quads);
      SCOPED_TRACE(testing::Message() << "kQ " << kQ << ", " << quads << " quads");
      EXPECT_GE(cut.slices, 1);
      EXPECT_LE(cut.slices, cut_slices(kQ));
      EXPECT_GE(int64_t(cut.slices) * cut.chunks * kQ, quads);  // every quad has a slot
      // No slice left empty, and one chunk fewer would not hold the row.
      EXPECT_LT(int64_t(cut.slices - 1) * cut.chunks * kQ, quads);
      if (cut.chunks > 1) EXPECT_LT(int64_t(cut_slices(kQ)) * (cut.chunks - 1) * kQ, quads);
    }
  }
}

TEST(ChunkRanges, SplitTheChunksInOrderWithinTheWarpBounds) {
  EXPECT_EQ(chunk_ranges(640).n, kMaxWarps);  // a 5120-long row of 8-element chunks
  EXPECT_EQ(chunk_ranges(640).per, 40);
  for (int n_chunks = 1; n_chunks <= 3000; ++n_chunks) {
    const ChunkRanges r = chunk_ranges(n_chunks);
    SCOPED_TRACE(testing::Message() << n_chunks << " chunks");
    EXPECT_GE(r.n, 1);
    EXPECT_LE(r.n, kMaxWarps);
    EXPECT_GE(int64_t(r.n) * r.per, n_chunks);        // every chunk in a range
    EXPECT_LT(int64_t(r.n) * (r.per - 1), n_chunks);  // the shortest ranges that do
    if (r.n > 1) EXPECT_GE(r.per, kMinChunksPerWarp);
  }
}

}  // namespace
}  // namespace gdn::cuda::mm
