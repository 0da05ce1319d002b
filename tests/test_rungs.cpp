// The ladder's rungs on the CPU reference: parsing, the steps each rung removes (predicted
// per layer, and additive across rungs), and every combination of the program rewrites giving
// bit-identical logits — the CPU composes each fused step from the unfused reference ops, so
// any difference is a rewrite that changed what is computed. The CUDA twin of the last test
// (every combination including graphs, on the GPU kernels) is in test_cuda_backend.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "common/error.h"
#include "cpu/cpu_executor.h"
#include "model/program.h"
#include "synth/synth.h"

namespace gdn {
namespace {

using model::Rung;
using model::Rungs;

TEST(Rungs, ParseNamesAllNoneAndRemovals) {
  EXPECT_EQ(model::parse_rungs("none"), Rungs::none());
  EXPECT_EQ(model::parse_rungs("all"), Rungs::exact());
  EXPECT_EQ(model::format_rungs(Rungs::none()), "none");
  EXPECT_EQ(model::parse_rungs(model::format_rungs(Rungs::exact())), Rungs::exact());
  const Rungs r = model::parse_rungs("state-inplace,graphs");
  EXPECT_TRUE(r.has(Rung::StateInplace));
  EXPECT_TRUE(r.has(Rung::Graphs));
  EXPECT_FALSE(r.has(Rung::GatingFused));
  EXPECT_EQ(model::parse_rungs("all,-graphs"), Rungs::exact().without(Rung::Graphs));
  EXPECT_EQ(model::parse_rungs("all,state-f16").state_type(), model::StateType::F16);
  EXPECT_FALSE(Rungs::exact().has(Rung::StateF16));  // not exact: off by default
  EXPECT_FALSE(Rungs::exact().has(Rung::StateBf16));
}

// gdn bench --help: every rung's name and what it does.
TEST(Rungs, HelpDescribesEveryRung) {
  const std::string help = model::describe_rungs();
  for (const model::RungInfo& i : model::rung_table()) {
    EXPECT_NE(help.find(i.name), std::string::npos) << i.name;
    EXPECT_NE(help.find(i.what), std::string::npos) << i.what;
  }
}

// The state types' names (as --rungs writes them) and stored sizes (bytes per token the bench
// reports, the buffers the executors allocate); a value outside the enum gets "?" and 0.
TEST(StateType, NamesAndBytesPerValue) {
  using model::StateType;
  EXPECT_STREQ(model::state_type_name(StateType::F32), "f32");
  EXPECT_STREQ(model::state_type_name(StateType::F16), "f16");
  EXPECT_STREQ(model::state_type_name(StateType::BF16), "bf16");
  EXPECT_EQ(model::state_type_bytes(StateType::F32), 4u);
  EXPECT_EQ(model::state_type_bytes(StateType::F16), 2u);
  EXPECT_EQ(model::state_type_bytes(StateType::BF16), 2u);
  const auto outside = static_cast<StateType>(7);
  EXPECT_STREQ(model::state_type_name(outside), "?");
  EXPECT_EQ(model::state_type_bytes(outside), 0u);
}

TEST(Rungs, UnknownOrContradictoryRungsAreRefusedByName) {
  try {
    model::parse_rungs("state-inplace,gating-fusd");
    FAIL() << "an unknown rung was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'gating-fusd'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(model::parse_rungs(""), Error);
  EXPECT_THROW(model::parse_rungs("state-f16,state-bf16"), Error);
}

std::unique_ptr<synth::InMemory> tiny(quant::Type type, uint64_t seed = 7) {
  synth::Options o;
  o.type = type;
  o.seed = seed;
  return synth::make_in_memory(synth::preset("tiny"), o);
}

int64_t steps(const model::Model& m, Rungs r, int64_t T = 1) {
  return static_cast<int64_t>(model::build_forward(m, T, false, {.rungs = r}).steps.size());
}

// The dispatches each program rung removes, predicted from the layer structure, and the
// removals adding up exactly when the rungs are combined (as the seed's ladder observed).
TEST(Rungs, EachRungRemovesThePredictedStepsAndTheyAdd) {
  auto m = tiny(quant::Type::Q8_0);
  const model::HParams& hp = m->model.hp;
  const int64_t gdn = hp.n_recurrent(), att = hp.n_attention(), L = hp.n_layer;
  const int64_t base = steps(m->model, Rungs::none());
  const auto removed = [&](Rung r) { return base - steps(m->model, Rungs::none().with(r)); };
  EXPECT_EQ(removed(Rung::StateInplace), gdn);     // the gather
  EXPECT_EQ(removed(Rung::StateWriteFused), gdn);  // the scatter
  EXPECT_EQ(removed(Rung::GatingFused), 4 * gdn);  // sigmoid, add, softplus, mul
  EXPECT_EQ(removed(Rung::L2NormFused), 2 * gdn);  // q and k norms
  EXPECT_EQ(removed(Rung::ConvInplace), 3 * gdn);  // concat, state copy, silu
  EXPECT_EQ(removed(Rung::Graphs), 0);             // not a program rewrite
  // norm-gemv-fused per layer: the input norm and its GEMVs become one step (GDN: 5 → 1,
  // attention: 4 → 1), the gate + GEMV + add (GDN: 4 → 1, attention: 3 → 1), the FFN
  // (norm, 3 GEMVs, SwiGLU, add: 6 → 2), the attention's split, q/k norms and ropes and KV
  // store (6 → 0: the attention step does them); the output head stays unfused (program.cpp
  // says why).
  EXPECT_EQ(removed(Rung::NormGemvFused), gdn * (4 + 3) + att * (3 + 2 + 6) + L * 4);
  int64_t sum = 0;
  for (const model::RungInfo& i : model::rung_table()) {
    if (i.exact) sum += removed(i.rung);
  }
  // One interaction: with both conv-inplace and norm-gemv-fused, a decode's conv step runs in
  // the qkv GEMV's epilogue (one step fewer per GDN layer than the two rungs apart).
  const Rungs both = Rungs::none().with(Rung::ConvInplace).with(Rung::NormGemvFused);
  EXPECT_EQ(base - steps(m->model, both),
            removed(Rung::ConvInplace) + removed(Rung::NormGemvFused) + gdn);
  EXPECT_EQ(base - steps(m->model, Rungs::exact()), sum + gdn);
  const model::Program fused = model::build_forward(m->model, 1, false, {.rungs = both});
  int64_t conv_steps = 0, conv_epilogues = 0;
  for (const model::Step& st : fused.steps) {
    conv_steps += st.op == model::Op::ConvStep;
    conv_epilogues += st.op == model::Op::MatMulFused && st.epilogue == model::Epilogue::ConvSilu;
  }
  EXPECT_EQ(conv_steps, 0);
  EXPECT_EQ(conv_epilogues, gdn);
  // Prefill programs keep their batched matmuls and their q/k norms unfused.
  EXPECT_EQ(steps(m->model, Rungs::none(), 4) - steps(m->model, Rungs::exact(), 4),
            sum - removed(Rung::NormGemvFused) - removed(Rung::L2NormFused));
}

// describe() lists a program step by step: what the rungs removed can be read off it. With every
// exact rung a GDN layer's decode is five steps; the baseline gathers and scatters its state.
TEST(Rungs, DescribedProgramsShowEveryStep) {
  auto m = tiny(quant::Type::Q8_0);
  std::string text[2];
  for (const bool all : {false, true}) {
    const Rungs r = all ? Rungs::exact() : Rungs::none();
    const model::Program p = model::build_forward(m->model, 1, false, {.rungs = r});
    text[all] = p.describe();
    EXPECT_EQ(std::count(text[all].begin(), text[all].end(), '\n'), std::ssize(p.steps));
  }
  EXPECT_NE(text[0].find("state_gather L0\ngdn_recurrence L0\nstate_scatter L0\n"),
            std::string::npos)
      << text[0];
  const std::string fused_layer =
      "embed\n"
      "mat_mul_fused L0 blk.0.attn_qkv.weight blk.0.attn_gate.weight blk.0.ssm_beta.weight "
      "blk.0.ssm_alpha.weight silu(attn_gate)\n"
      "gdn_recurrence L0 state-in-slot state-out-slot +gating +l2norm\n"
      "mat_mul_fused blk.0.ssm_out.weight\n"
      "mat_mul_fused blk.0.ffn_gate.weight blk.0.ffn_up.weight\n"
      "mat_mul_fused blk.0.ffn_down.weight\n";
  EXPECT_TRUE(text[1].starts_with(fused_layer)) << text[1];
}

std::vector<float> decode(runtime::Executor& ex, const std::vector<int32_t>& ids) {
  std::vector<float> all, row;
  ex.reset_slot(0);
  for (int32_t id : ids) {
    ex.forward(std::span<const int32_t>(&id, 1), 0, false, row);
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

// Every combination of the six program rungs, decode and prefill, against the baseline.
TEST(Rungs, EveryCombinationIsBitIdenticalOnTheCpu) {
  for (quant::Type type : {quant::Type::F32, quant::Type::Q1_0}) {
    auto m = tiny(type);
    cpu::CpuExecutor ex(m->model, {.n_slots = 1,
                                   .n_ctx = 32,
                                   .n_threads = 2,
                                   .q8_activations = type == quant::Type::Q1_0,
                                   .rungs = Rungs::none()});
    const std::vector<int32_t> ids = {5, 17, 300, 2047, 0, 99};
    const std::vector<float> want = decode(ex, ids);
    std::vector<float> want_prefill;
    ex.reset_slot(0);
    ex.forward(ids, 0, true, want_prefill);
    std::vector<Rung> program_rungs;
    for (const model::RungInfo& i : model::rung_table()) {
      if (i.exact && i.rung != Rung::Graphs) program_rungs.push_back(i.rung);
    }
    int identical = 0;
    const int combos = 1 << program_rungs.size();
    for (int mask = 0; mask < combos; ++mask) {
      Rungs r;
      for (size_t b = 0; b < program_rungs.size(); ++b) {
        if (mask >> b & 1) r = r.with(program_rungs[b]);
      }
      ex.set_rungs(r);
      std::vector<float> prefill;
      ex.reset_slot(0);
      ex.forward(ids, 0, true, prefill);
      const bool same = decode(ex, ids) == want && prefill == want_prefill;
      EXPECT_TRUE(same) << quant::type_info(type).name << " rungs " << model::format_rungs(r);
      identical += same;
    }
    std::cout << quant::type_info(type).name << ": " << identical << "/" << combos
              << " combinations identical\n";
  }
}

// A reduced-precision state changes the logits (it is not exact) but only slightly, and the
// fused state write keeps working with it: in place and gather/scatter agree bit for bit.
TEST(Rungs, ReducedPrecisionStatesStayCloseAndKeepTheFusedWrite) {
  auto m = tiny(quant::Type::F32);
  cpu::CpuExecutor ex(m->model, {.n_slots = 1, .n_ctx = 32, .n_threads = 2});
  const std::vector<int32_t> ids = {5, 17, 300, 2047, 0, 99, 7, 7};
  const std::vector<float> f32 = decode(ex, ids);
  float max_logit = 0.0f;
  for (float v : f32) max_logit = std::max(max_logit, std::fabs(v));
  for (Rung st : {Rung::StateF16, Rung::StateBf16}) {
    ex.set_rungs(Rungs::exact().with(st));
    const std::vector<float> fused = decode(ex, ids);
    ex.set_rungs(Rungs::none().with(st));
    EXPECT_EQ(decode(ex, ids), fused) << model::rung_info(st).name;
    double dev = 0.0;
    for (size_t i = 0; i < f32.size(); ++i)
      dev = std::max(dev, double(std::fabs(fused[i] - f32[i])));
    EXPECT_GT(dev, 0.0) << model::rung_info(st).name << " changed nothing: not stored rounded?";
    EXPECT_LT(dev, 0.05 * max_logit) << model::rung_info(st).name;
  }
}

}  // namespace
}  // namespace gdn
