// The small shared pieces: the command line's token id lists and the CPU reference's thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ids.h"
#include "common/parallel.h"

namespace gdn {
namespace {

std::string id_error(std::string_view text) {
  try {
    parse_ids(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Ids, ParseTrimsSpacesAndRoundTripsThroughFormat) {
  EXPECT_EQ(parse_ids("1, 2 ,3"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse_ids("2147483647"), (std::vector<int32_t>{2147483647}));
  const std::vector<int32_t> ids = {0, 7, 151643, 42};
  EXPECT_EQ(parse_ids(format_ids(ids)), ids);
}

// Each refusal names the entry and its position in the list.
TEST(Ids, BadEntriesAreNamedWithTheirPosition) {
  EXPECT_NE(id_error("").find("'' at entry 0"), std::string::npos);
  EXPECT_NE(id_error("1,2,").find("'' at entry 2"), std::string::npos);
  EXPECT_NE(id_error("1,-1").find("'-1' at entry 1"), std::string::npos);
  EXPECT_NE(id_error("2147483648").find("'2147483648' at entry 0"), std::string::npos);
  EXPECT_NE(id_error("3,1x").find("'1x' at entry 1"), std::string::npos);
  EXPECT_NE(id_error("1 2").find("'1 2' at entry 0"), std::string::npos);
}

TEST(ThreadPool, CoversEveryIndexOnceInContiguousChunks) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.size(), 3);
  for (const int64_t n : {0, 1, 2, 3, 7, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> calls = 0;
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      EXPECT_LT(b, e);
      ++calls;
      for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)], 1) << n << " " << i;
    EXPECT_LE(calls, pool.size());
  }
}

// An exception from any chunk, the caller's or a worker's, reaches the caller, and the pool
// still works afterwards.
TEST(ThreadPool, RethrowsAChunksExceptionAndStaysUsable) {
  ThreadPool pool(4);
  for (const int64_t failing : {int64_t{0}, int64_t{999}}) {
    EXPECT_THROW(pool.parallel_for(1000,
                                   [&](int64_t b, int64_t e) {
                                     if (b <= failing && failing < e) {
                                       throw std::runtime_error("chunk failed");
                                     }
                                   }),
                 std::runtime_error);
  }
  std::atomic<int64_t> sum = 0;
  pool.parallel_for(100, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum, 4950);
}

}  // namespace
}  // namespace gdn
