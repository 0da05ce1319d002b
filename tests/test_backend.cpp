// Backend selection (runtime/backend.h): "auto" picks what this build and machine have, a
// backend that is unknown or unavailable is refused by name (never replaced by another one),
// and the executor it makes runs with the options it was given.
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "error_of.h"
#include "runtime/backend.h"
#include "runtime/executor.h"
#include "synth/synth.h"

namespace gdn::runtime {
namespace {

using testing::error_of;

TEST(Backend, AutoPicksCudaOnlyWhereItIsUsable) {
  EXPECT_TRUE(!cuda_usable() || cuda_built());
  EXPECT_EQ(resolve_backend("auto"), cuda_usable() ? "cuda" : "cpu");
  EXPECT_EQ(resolve_backend("cpu"), "cpu");
}

TEST(Backend, CudaIsRefusedWithTheReasonWhereItCannotRun) {
  if (cuda_usable()) {
    EXPECT_EQ(resolve_backend("cuda"), "cuda");
    return;
  }
  const std::string msg = error_of([] { resolve_backend("cuda"); });
  EXPECT_NE(msg.find("backend 'cuda'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(cuda_built() ? "needs a CUDA GPU" : "not in this build"), std::string::npos)
      << msg;
}

// Dispatch counts add per op and in total (a CUDA graph replay adds the launches counted when it
// was captured this way).
TEST(DispatchCount, AddsPerOpAndInTotal) {
  DispatchCount a, b;
  a.add(model::Op::MatMul, 1);
  b.add(model::Op::Embed, 2);
  b.add(model::Op::MatMul, 3);
  a.add(b);
  EXPECT_EQ(a.total, 6);
  EXPECT_EQ(a.by_op[static_cast<size_t>(model::Op::Embed)], 2);
  EXPECT_EQ(a.by_op[static_cast<size_t>(model::Op::MatMul)], 4);
  int64_t sum = 0;
  for (int64_t n : a.by_op) sum += n;
  EXPECT_EQ(sum, a.total);
  EXPECT_EQ(b.total, 5);  // the added count is left as it was
}

TEST(Backend, UnknownNamesAreRefusedByName) {
  for (const char* name : {"tpu", "", "CPU", "cuda "}) {
    const std::string msg = error_of([&] { resolve_backend(name); });
    EXPECT_NE(msg.find(fmt::format("unknown backend '{}'", name)), std::string::npos) << msg;
    EXPECT_NE(msg.find("auto, cpu, cuda"), std::string::npos) << msg;
    EXPECT_NE(error_of([&] { roofline_bandwidth(name); }), "");
    EXPECT_NE(error_of([&] { describe_backend(name, 1); }), "");
  }
}

TEST(Backend, TheCpuIsDescribedByItsThreadsAndHasNoMeasuredRoofline) {
  EXPECT_EQ(describe_backend("cpu", 3), "cpu, 3 threads");
  EXPECT_EQ(describe_backend("cpu", 0),
            fmt::format("cpu, {} threads", std::thread::hardware_concurrency()));
  EXPECT_EQ(roofline_bandwidth("cpu"), 0.0);
}

TEST(Backend, MakeExecutorRunsTheNamedBackendWithTheGivenOptions) {
  synth::Options o;
  o.seed = 3;
  auto mem = synth::make_in_memory(synth::preset("tiny"), o);
  auto ex = make_executor("cpu", mem->model, {.n_slots = 2, .n_ctx = 4, .n_threads = 1});
  EXPECT_EQ(ex->name(), "cpu");
  std::vector<float> logits;
  const std::vector<int32_t> four = {1, 2, 3, 4}, five = {1, 2, 3, 4, 5};
  ex->forward(four, 1, false, logits);
  EXPECT_EQ(ex->n_past(1), 4);
  EXPECT_EQ(logits.size(), size_t(mem->model.hp.n_vocab));
  EXPECT_NE(error_of([&] { ex->forward(five, 0, false, logits); }).find("context of 4"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ex->forward(four, 2, false, logits); }).find("slot 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_executor("gpu", mem->model, {}); }).find("'gpu'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_executor("cpu", mem->model, {.n_slots = 0}); }).find("n_slots"),
            std::string::npos);
}

// Null dispatches are empty steps (gdn bench --null-dispatches prices a GPU dispatch with
// them): on the CPU they change neither the logits nor the count of dispatches, which counts
// kernel launches; a negative count is refused by the executor, naming it.
TEST(Backend, NullDispatchesChangeNothingOnTheCpu) {
  auto mem = synth::make_in_memory(synth::preset("tiny"), {});
  auto ex = make_executor("cpu", mem->model, {.n_slots = 2, .n_ctx = 8, .n_threads = 1});
  std::vector<float> plain, padded;
  const int32_t id = 5;
  ex->forward(std::span(&id, 1), 0, false, plain);
  const int64_t dispatches = ex->last_dispatches();
  ex->set_null_dispatches(7);
  ex->forward(std::span(&id, 1), 1, false, padded);
  EXPECT_EQ(padded, plain);
  EXPECT_EQ(ex->last_dispatches(), dispatches);
  EXPECT_NE(error_of([&] { ex->set_null_dispatches(-1); }).find("got -1"), std::string::npos);
}

}  // namespace
}  // namespace gdn::runtime
