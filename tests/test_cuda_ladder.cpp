// The ladder on the GPU: every combination of the exact rungs (model/rungs.h) must give logits
// bit-identical to the baseline at every step of a greedy decode — on the synthetic
// Bonsai-27B Q1_0 and on the HF fixtures — the reduced-precision states must keep the fused
// state write working, and a combination a kernel cannot run must be refused, never run by a
// silent fallback. Needs a GPU: without one every test is skipped with a message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "cuda/cuda_executor.h"
#include "cuda/device.h"
#include "hf_fixture.h"
#include "model/program.h"
#include "model/weights.h"
#include "synth/synth.h"

namespace gdn::testing {
namespace {

using model::Rung;
using model::Rungs;

#define REQUIRE_GPU() \
  if (!cuda::available()) GTEST_SKIP() << "no CUDA GPU on this machine: GPU test skipped"

// Greedy decode from `prompt`: the logits of every generated step.
struct Trace {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
};

Trace greedy(runtime::Executor& ex, const std::vector<int32_t>& prompt, int steps) {
  Trace t;
  std::vector<float> row;
  ex.reset_slot(0);
  for (size_t i = 0; i + 1 < prompt.size(); ++i)
    ex.forward(std::span(&prompt[i], 1), 0, false, row);
  int32_t next = prompt.back();
  for (int s = 0; s < steps; ++s) {
    ex.forward(std::span<const int32_t>(&next, 1), 0, false, row);
    next = argmax(row.data(), static_cast<int64_t>(row.size()));
    t.logits.push_back(row);
    t.tokens.push_back(next);
  }
  return t;
}

// Every subset of the exact rungs.
std::vector<Rungs> exact_combinations() {
  std::vector<Rung> exact;
  for (const model::RungInfo& i : model::rung_table()) {
    if (i.exact) exact.push_back(i.rung);
  }
  std::vector<Rungs> all;
  for (int mask = 0; mask < (1 << exact.size()); ++mask) {
    Rungs r;
    for (size_t b = 0; b < exact.size(); ++b) {
      if (mask >> b & 1) r = r.with(exact[b]);
    }
    all.push_back(r);
  }
  return all;
}

// Runs the matrix on one model; returns the number of identical combinations.
int identical_combinations(const model::Model& m, const std::vector<int32_t>& prompt, int steps,
                           const std::string& what) {
  cuda::CudaExecutor ex(m, {.n_slots = 1, .n_ctx = 512, .rungs = Rungs::none()});
  const Trace base = greedy(ex, prompt, steps);
  int same = 0;
  const std::vector<Rungs> combos = exact_combinations();
  for (const Rungs& r : combos) {
    ex.set_rungs(r);
    const Trace t = greedy(ex, prompt, steps);
    int first_diff = -1;
    for (int s = 0; s < steps && first_diff < 0; ++s) {
      if (t.logits[s] != base.logits[s]) first_diff = s;
    }
    EXPECT_EQ(first_diff, -1) << what << ": rungs " << model::format_rungs(r)
                              << " differ from the baseline at step " << first_diff;
    same += first_diff < 0;
  }
  std::printf("%s: %d/%zu combinations identical over %d greedy steps\n", what.c_str(), same,
              combos.size(), steps);
  return same;
}

TEST(CudaLadder, EveryExactCombinationIsBitIdenticalOnHfFixtures) {
  REQUIRE_GPU();
  for (const char* name : {"hf_tiny_gqa3", "hf_tiny_eq"}) {
    const HfFixture fx = load_fixture(name);
    const model::Model m = model::Model::load(converted(fx, quant::Type::F32));
    EXPECT_EQ(identical_combinations(m, fx.prompt, 128, fx.name), 128);
  }
}

TEST(CudaLadder, EveryExactCombinationIsBitIdenticalOnTinyQ1_0) {
  REQUIRE_GPU();
  synth::Options o;
  o.type = quant::Type::Q1_0;
  auto mem = synth::make_in_memory(synth::preset("tiny"), o);
  EXPECT_EQ(identical_combinations(mem->model, {3, 1999, 17}, 128, "tiny q1_0"), 128);
}

TEST(CudaLadder, EveryExactCombinationIsBitIdenticalOnBonsai27B) {
  REQUIRE_GPU();
  synth::Options o;
  o.type = quant::Type::Q1_0;
  auto mem = synth::make_in_memory(synth::preset("bonsai-27b"), o);
  EXPECT_EQ(identical_combinations(mem->model, {1}, 128, "bonsai-27b q1_0"), 128);
  // With every exact rung each fused GEMV step is one launch: the GDN qkv steps fold their BF16
  // beta and alpha rows into the Q1_0 launch (FusedGemv::fold_*) instead of a side launch.
  cuda::CudaExecutor ex(mem->model, {.n_slots = 1, .n_ctx = 64, .rungs = Rungs::exact()});
  std::vector<float> row;
  const int32_t id = 1;
  ex.forward(std::span(&id, 1), 0, false, row);
  const model::Program p = model::build_forward(mem->model, 1, false, {.rungs = Rungs::exact()});
  const auto fused_steps = std::count_if(p.steps.begin(), p.steps.end(), [](const model::Step& s) {
    return s.op == model::Op::MatMulFused;
  });
  EXPECT_EQ(ex.last_dispatch_count().by_op[static_cast<size_t>(model::Op::MatMulFused)],
            fused_steps);
}

// f16/bf16 states are not exact: the deviation from the f32 state and the first differing
// greedy token are reported. The fused state read/write must still run with them: every
// combination of state-inplace and state-write-fused equals the gather/scatter baseline.
TEST(CudaLadder, ReducedPrecisionStatesKeepTheFusedStateWrite) {
  REQUIRE_GPU();
  synth::Options o;
  o.type = quant::Type::Q1_0;
  auto mem = synth::make_in_memory(synth::preset("bonsai-27b"), o);
  cuda::CudaExecutor ex(mem->model, {.n_slots = 1, .n_ctx = 512});
  const int steps = 64;
  const Trace f32 = greedy(ex, {1}, steps);
  for (Rung st : {Rung::StateF16, Rung::StateBf16}) {
    ex.set_rungs(Rungs::exact().with(st));
    const Trace t = greedy(ex, {1}, steps);
    for (Rungs io : {Rungs::none(), Rungs::none().with(Rung::StateInplace),
                     Rungs::none().with(Rung::StateWriteFused)}) {
      ex.set_rungs(
          Rungs::exact().without(Rung::StateInplace).without(Rung::StateWriteFused).with(st) | io);
      EXPECT_EQ(greedy(ex, {1}, steps).logits, t.logits)
          << model::rung_info(st).name << " with " << model::format_rungs(io);
    }
    double dev = 0.0, max_logit = 0.0;
    int first_token = -1;
    for (int s = 0; s < steps; ++s) {
      for (size_t i = 0; i < t.logits[s].size(); ++i) {
        dev = std::max(dev, double(std::fabs(t.logits[s][i] - f32.logits[s][i])));
        max_logit = std::max(max_logit, double(std::fabs(f32.logits[s][i])));
      }
      if (first_token < 0 && t.tokens[s] != f32.tokens[s]) first_token = s;
    }
    std::printf(
        "%s vs f32 state over %d greedy steps: max|dlogit| %.4g (%.3g of max|logit|), "
        "first differing token at step %d (-1: none)\n",
        model::rung_info(st).name, steps, dev, dev / max_logit, first_token);
    EXPECT_GT(dev, 0.0) << "the state was not stored in reduced precision";
  }
}

// A model whose FFN gate and up are in different kernel families (a mixed quantisation, as
// llama-quantize makes them) cannot run the SwiGLU-pair epilogue in one launch: with
// norm-gemv-fused on, the executor must refuse and name the step — never quietly run the
// unfused kernels instead. Without the rung the same model runs.
TEST(CudaLadder, ImpossibleCombinationIsRefusedNotFallenBackFrom) {
  REQUIRE_GPU();
  synth::Options q1, f32;
  q1.type = quant::Type::Q1_0;
  f32.type = quant::Type::F32;
  auto mixed = synth::make_in_memory(synth::preset("tiny"), q1);
  auto donor = synth::make_in_memory(synth::preset("tiny"), f32);
  mixed->model.layers[0].ffn_up = donor->model.layers[0].ffn_up;
  std::vector<float> logits;
  const int32_t id = 5;
  cuda::CudaExecutor ex(mixed->model, {.n_slots = 1, .n_ctx = 16});
  try {
    ex.forward(std::span<const int32_t>(&id, 1), 0, false, logits);
    FAIL() << "a SwiGLU pair across kernel families ran with norm-gemv-fused on";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mat_mul_fused"), std::string::npos) << e.what();
  }
  ex.set_rungs(Rungs::exact().without(Rung::NormGemvFused));
  ex.reset_slot(0);
  EXPECT_NO_THROW(ex.forward(std::span<const int32_t>(&id, 1), 0, false, logits));
}

}  // namespace
}  // namespace gdn::testing
