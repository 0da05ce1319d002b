// The host-side rules that fix a one-token product's summation order (q1_dot.cuh's q1_cut,
// matmul.cuh's chunk_ranges), and the host-side choices the executor and the op checks make from
// shapes alone (launch counts, folded rows, check references, attention's codes out). They need no
// GPU, so CI runs them; the GPU op checks then prove every kernel follows them bit for bit.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/kernels.h"
#include "cuda/matmul.cuh"
#include "cuda/matrix.h"
#include "cuda/norm.cuh"
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

// Every weight format but Q1_0.
constexpr quant::Type kOtherTypes[] = {quant::Type::Q8_0,  quant::Type::Q4_0, quant::Type::Q2_0,
                                       quant::Type::PQ2_0, quant::Type::BF16, quant::Type::F16,
                                       quant::Type::F32};

GpuMatrix shape(quant::Type type, int64_t n_in, int64_t n_out, bool f32_activations = false) {
  GpuMatrix w;
  w.type = type;
  w.n_in = n_in;
  w.n_out = n_out;
  w.f32_activations = f32_activations;
  return w;
}

// What the executor counts as matmul()'s dispatches: the Q1_0 int8 path is a quantise kernel
// and a product kernel, except one token of four-quad rows (n_in > 18432) on a narrow output,
// which the one-launch GEMV runs; every other format, and Q1_0 on f32 activations, is one.
TEST(MatmulLaunches, FollowTheQ1DefaultPathByShape) {
  using quant::Type;
  EXPECT_EQ(matmul_launches(shape(Type::Q1_0, 5120, 6144), 1), 2);
  EXPECT_EQ(matmul_launches(shape(Type::Q1_0, 17408, 5120), 1), 2);
  EXPECT_EQ(matmul_launches(shape(Type::Q1_0, 5120, 248320), 1), 2);  // the head: wide, flat
  EXPECT_EQ(matmul_launches(shape(Type::Q1_0, 20480, 5120), 1), 1);   // four quads a chunk
  EXPECT_EQ(matmul_launches(shape(Type::Q1_0, 20480, 10240), 1), 2);  // ... but wide
  EXPECT_EQ(matmul_launches(shape(Type::Q1_0, 20480, 5120), 2), 2);   // a batch
  EXPECT_EQ(matmul_launches(shape(Type::Q1_0, 5120, 6144), 512), 2);
  EXPECT_EQ(matmul_launches(shape(Type::Q1_0, 5120, 6144, true), 1), 1);
  for (Type t : kOtherTypes) {
    EXPECT_EQ(matmul_launches(shape(t, 5120, 6144), 1), 1) << quant::type_info(t).name;
    EXPECT_EQ(matmul_launches(shape(t, 5120, 6144), 64), 1) << quant::type_info(t).name;
  }
}

// The op checks compare Q1_0 with the CPU's int8-activation dot (exact per block, so tight) and
// every other format with the f32 dot (FMA chains in another order, so looser).
TEST(MatmulReference, Q1AgainstTheInt8DotTighterThanTheRest) {
  const MatmulReference q1 = matmul_reference(quant::Type::Q1_0);
  EXPECT_TRUE(q1.q8_128_activations);
  for (quant::Type t : kOtherTypes) {
    const MatmulReference r = matmul_reference(t);
    EXPECT_FALSE(r.q8_128_activations) << quant::type_info(t).name;
    EXPECT_GT(r.tolerance, q1.tolerance) << quant::type_info(t).name;
    EXPECT_LE(r.tolerance, 1e-4) << quant::type_info(t).name;
  }
  EXPECT_GT(q1.tolerance, 0.0);
}

// with_fold hands f the side's matrices and outputs as folded rows and leaves the rest of f.
TEST(WithFold, TakesTheSideMatricesAndOutputsOnly) {
  const GpuMatrix main_w = shape(quant::Type::Q1_0, 5120, 10240);
  const GpuMatrix beta = shape(quant::Type::BF16, 5120, 48),
                  alpha = shape(quant::Type::BF16, 5120, 48);
  float x[4], norm[4], y0[4], yb[4], ya[4];
  FusedGemv f;
  f.prologue = Prologue::RmsNorm;
  f.x = x;
  f.norm = norm;
  f.eps = 1e-6f;
  f.n = 1;
  f.w[0] = &main_w;
  f.y[0] = y0;
  FusedGemv side = f;
  side.n = 2;
  side.w[0] = &beta;
  side.w[1] = &alpha;
  side.y[0] = yb;
  side.y[1] = ya;
  const FusedGemv g = with_fold(f, side);
  EXPECT_EQ(g.fold_n, 2);
  EXPECT_EQ(g.fold_w[0], &beta);
  EXPECT_EQ(g.fold_w[1], &alpha);
  EXPECT_EQ(g.fold_y[0], yb);
  EXPECT_EQ(g.fold_y[1], ya);
  EXPECT_EQ(g.n, 1);
  EXPECT_EQ(g.w[0], &main_w);
  EXPECT_EQ(g.y[0], y0);
  EXPECT_EQ(g.x, x);
  EXPECT_EQ(g.norm, norm);
  side.n = 1;
  const FusedGemv one = with_fold(f, side);
  EXPECT_EQ(one.fold_n, 1);
  EXPECT_EQ(one.fold_w[0], &beta);
  EXPECT_EQ(one.fold_w[1], nullptr);
  EXPECT_EQ(one.fold_y[1], nullptr);
}

// Attention hands attn_output codes of whole 128-element blocks per head, up to its largest D.
TEST(AttentionCodesOut, WholeBlocksUpToTheLargestHead) {
  EXPECT_TRUE(attn_codes_out_ok(128));
  EXPECT_TRUE(attn_codes_out_ok(256));
  for (int64_t d : {0, 64, 96, 192, 384, 512}) EXPECT_FALSE(attn_codes_out_ok(d)) << d;
}

// norm.cuh's canonical order: its tiles cover every element of a chunk exactly once; past one
// virtual warp a virtual thread's eight elements are the eighth 8j..8j+7 of its tile (what the
// Q1_0 GEMV's direct prologue sums from the eighth it loaded); a head keeps lanes 32 apart.
TEST(NormTileIndex, CoversTheChunkOnceInEighthsPastOneWarp) {
  for (int n : {4, 96, 128, 255, 256, 257, 1000, 5120, 6144, 8192, 8200, 17408}) {
    SCOPED_TRACE(testing::Message() << "n " << n);
    const int T = norm::norm_threads(n);
    EXPECT_EQ(norm::consecutive_tiles(n), n > 256);
    std::vector<int> seen(static_cast<size_t>(n), 0);
    for (int base = 0; base < n; base += norm::kPerThread * T) {
      for (int j = 0; j < T; ++j) {
        for (int e = 0; e < norm::kPerThread; ++e) {
          const int i = norm::tile_index(n, base, j, e);
          ASSERT_GE(i, base);
          ASSERT_LT(i, base + norm::kPerThread * T);
          if (i < n) ++seen[static_cast<size_t>(i)];
          EXPECT_EQ(i, n > 256 ? base + 8 * j + e : base + 32 * e + j);
        }
      }
    }
    for (int i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << "element " << i;
  }
}

}  // namespace
}  // namespace gdn::cuda::mm
