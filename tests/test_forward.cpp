// The CPU reference forward on a synthetic tiny model: prefill and decode agree, slots
// snapshot and roll back exactly, and bad requests are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>

#include <fmt/format.h>

#include "common/error.h"
#include "cpu/cpu_executor.h"
#include "executor_checks.h"
#include "model/program.h"
#include "synth/synth.h"

namespace gdn {
namespace {

std::unique_ptr<synth::InMemory> tiny(quant::Type type) {
  synth::Options o;
  o.type = type;
  o.seed = 7;
  return synth::make_in_memory(synth::preset("tiny"), o);
}

const std::vector<int32_t> kIds = {5, 17, 300, 2047, 0, 99, 1024, 7, 7, 512, 33};

std::vector<float> decode_all(runtime::Executor& ex, const std::vector<int32_t>& ids, int slot) {
  std::vector<float> all, row;
  for (int32_t id : ids) {
    ex.forward(std::span<const int32_t>(&id, 1), slot, true, row);
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

class Forward : public ::testing::TestWithParam<quant::Type> {};

// Each token goes through the same per-token arithmetic in either mode (the CPU kernels
// loop over tokens in order), so prefill and decode must agree bit for bit.
TEST_P(Forward, PrefillEqualsDecode) {
  auto m = tiny(GetParam());
  cpu::CpuExecutor ex(m->model, {.n_slots = 2, .n_ctx = 64, .n_threads = 2});
  std::vector<float> pre;
  ex.forward(kIds, 0, true, pre);
  const std::vector<float> dec = decode_all(ex, kIds, 1);
  ASSERT_EQ(pre.size(), kIds.size() * size_t(m->model.hp.n_vocab));
  EXPECT_EQ(pre, dec);
  float max_abs = 0;
  for (float v : pre) {
    ASSERT_TRUE(std::isfinite(v));
    max_abs = std::max(max_abs, std::abs(v));
  }
  EXPECT_GT(max_abs, 0.1f);  // logits are not degenerate
  EXPECT_EQ(ex.n_past(0), int64_t(kIds.size()));
}

TEST_P(Forward, LastLogitsOnlyMatchesLastRow) {
  auto m = tiny(GetParam());
  cpu::CpuExecutor ex(m->model, {.n_slots = 2, .n_ctx = 64, .n_threads = 2});
  std::vector<float> all, last;
  ex.forward(kIds, 0, true, all);
  ex.forward(kIds, 1, false, last);
  const size_t V = size_t(m->model.hp.n_vocab);
  ASSERT_EQ(last.size(), V);
  EXPECT_TRUE(std::equal(last.begin(), last.end(), all.end() - V));
}

// forward_view follows each forward while the logits buffer grows and shrinks: every view has
// the shape its forward asked for, and the last-token logits of a prefill equal the matching
// row of a longer prefill's every-token logits (LastLogitsOnlyMatchesLastRow's property, here
// across buffers of other sizes).
TEST_P(Forward, ViewFollowsEachForward) {
  auto m = tiny(GetParam());
  cpu::CpuExecutor ex(m->model, {.n_slots = 2, .n_ctx = 64, .n_threads = 2});
  const auto v = testing::views_through_growth(ex, kIds, 42);
  const size_t V = size_t(m->model.hp.n_vocab), T = kIds.size();
  ASSERT_EQ(v[0].size(), V);
  ASSERT_EQ(v[1].size(), T * V);
  ASSERT_EQ(v[2].size(), V);
  EXPECT_TRUE(std::equal(v[0].begin(), v[0].end(), v[1].begin() + (T - 2) * V));
  EXPECT_NE(v[2], v[0]);  // another context: the view moved on
}

INSTANTIATE_TEST_SUITE_P(Types, Forward,
                         ::testing::Values(quant::Type::F32, quant::Type::Q8_0, quant::Type::Q1_0),
                         [](const auto& info) {
                           return std::string(quant::type_info(info.param).name);
                         });

TEST(Slots, SnapshotAndRollbackAreExact) {
  auto m = tiny(quant::Type::Q8_0);
  cpu::CpuExecutor ex(m->model, {.n_slots = 2, .n_ctx = 64, .n_threads = 2});
  std::vector<float> a, b, again;
  ex.forward(std::span(kIds).first(6), 0, false, a);
  ex.copy_slot(0, 1);  // snapshot after 6 tokens
  const std::vector<int32_t> branch1 = {1, 2, 3}, branch2 = {4, 5};
  ex.forward(branch1, 0, false, a);
  ex.copy_slot(1, 0);  // roll back
  EXPECT_EQ(ex.n_past(0), 6);
  ex.forward(branch2, 0, false, b);
  ex.forward(branch1, 1, false, again);
  EXPECT_EQ(a, again);
  EXPECT_NE(a, b);
}

// The KV cache grows with the positions a sequence uses: the largest context the executors
// take (2^24 positions) would be 16 GiB of K and V per attention layer of the tiny model if
// allocated up front; grown, it runs, and gives the same logits as a small context.
TEST(Slots, TheKvCacheGrowsWithTheSequenceNotTheContext) {
  auto m = tiny(quant::Type::F32);
  cpu::CpuExecutor a(m->model, {.n_slots = 1, .n_ctx = 16, .n_threads = 2});
  cpu::CpuExecutor b(m->model, {.n_slots = 1, .n_ctx = int64_t(1) << 24, .n_threads = 2});
  const std::vector<float> want = decode_all(a, kIds, 0);
  EXPECT_EQ(decode_all(b, kIds, 0), want);
  b.reset_slot(0);  // and again from an empty cache, all positions at once
  std::vector<float> prefill;
  b.forward(kIds, 0, true, prefill);
  EXPECT_EQ(prefill, want);
}

TEST(Slots, ResetForgetsTheSequence) {
  auto m = tiny(quant::Type::Q8_0);
  cpu::CpuExecutor ex(m->model, {.n_slots = 1, .n_ctx = 64, .n_threads = 1});
  std::vector<float> first, second;
  ex.forward(kIds, 0, false, first);
  ex.reset_slot(0);
  ex.forward(kIds, 0, false, second);
  EXPECT_EQ(first, second);
}

TEST(Errors, ContextOverflowAndBadIdsAreRefused) {
  auto m = tiny(quant::Type::Q8_0);
  cpu::CpuExecutor ex(m->model, {.n_slots = 1, .n_ctx = 8, .n_threads = 1});
  std::vector<float> out;
  EXPECT_THROW(ex.forward(kIds, 0, false, out), Error);  // 11 > 8
  const std::vector<int32_t> bad = {1, 99999};
  EXPECT_THROW(ex.forward(bad, 0, false, out), Error);
  EXPECT_THROW(ex.forward(kIds, 3, false, out), Error);  // no slot 3
}

TEST(Program, BaselineGranularityIsCounted) {
  auto m = tiny(quant::Type::Q8_0);
  const model::Program p =
      model::build_forward(m->model, 1, false, {.rungs = model::Rungs::none()});
  auto count = [&](model::Op op) {
    return std::count_if(p.steps.begin(), p.steps.end(),
                         [&](const model::Step& s) { return s.op == op; });
  };
  const auto& hp = m->model.hp;
  EXPECT_EQ(count(model::Op::StateGather), hp.n_recurrent());
  EXPECT_EQ(count(model::Op::StateScatter), hp.n_recurrent());
  EXPECT_EQ(count(model::Op::Attention), hp.n_attention());
  // GDN: 4 projections + out; attention: q, k, v, o; FFN: 3 per layer; output head 1.
  EXPECT_EQ(count(model::Op::MatMul),
            5 * hp.n_recurrent() + 4 * hp.n_attention() + 3 * hp.n_layer + 1);
  cpu::CpuExecutor ex(m->model,
                      {.n_slots = 1, .n_ctx = 8, .n_threads = 1, .rungs = model::Rungs::none()});
  std::vector<float> out;
  ex.forward(std::span(kIds).first(1), 0, false, out);
  EXPECT_EQ(ex.last_dispatches(), int64_t(p.steps.size()));
}

// Op names label dispatch counts and timeline rows: one each, none shared.
TEST(Program, EveryOpHasItsOwnName) {
  std::vector<std::string> names;
  for (int i = 0; i < model::kOpCount; ++i) {
    const std::string n = model::op_name(static_cast<model::Op>(i));
    EXPECT_NE(n, "?") << "op " << i;
    EXPECT_EQ(std::count(names.begin(), names.end(), n), 0) << n;
    names.push_back(n);
  }
}

// A step's matrices are its leading non-null entries.
TEST(Program, StepMatricesAreTheLeadingNonNullOnes) {
  const model::Matrix a, b;
  EXPECT_EQ(model::Step{}.n_mats(), 0);
  EXPECT_EQ((model::Step{.mats = {&a, &b}}).n_mats(), 2);
  EXPECT_EQ((model::Step{.mats = {&a, nullptr, &b}}).n_mats(), 1);
}

// gdn bench --null-dispatches: N empty steps at the end of a decode program and nowhere else
// (a prefill's dispatches are not what it prices); a negative N is refused.
TEST(Program, NullDispatchesEndDecodeProgramsOnly) {
  auto m = tiny(quant::Type::Q8_0);
  const model::Program plain = model::build_forward(m->model, 1, false);
  const model::Program padded = model::build_forward(m->model, 1, false, {.null_dispatches = 3});
  ASSERT_EQ(padded.steps.size(), plain.steps.size() + 3);
  for (size_t i = 0; i < padded.steps.size(); ++i) {
    EXPECT_EQ(padded.steps[i].op == model::Op::Null, i >= plain.steps.size()) << "step " << i;
  }
  EXPECT_EQ(model::build_forward(m->model, 4, false, {.null_dispatches = 3}).steps.size(),
            model::build_forward(m->model, 4, false).steps.size());
  EXPECT_THROW(model::build_forward(m->model, 1, false, {.null_dispatches = -1}), Error);
}

// The timeline's weight bytes per step: a decode program reads every weight it streams in
// exactly one step, however the rungs fuse them.
TEST(Program, DecodeStepsReadEveryWeightOnce) {
  auto m = tiny(quant::Type::Q8_0);
  for (model::Rungs r : {model::Rungs::none(), model::Rungs::exact(),
                         model::Rungs::exact().without(model::Rung::NormGemvFused)}) {
    const model::Program p = model::build_forward(m->model, 1, false, {.rungs = r});
    uint64_t total = 0;
    for (const model::Step& s : p.steps) total += model::step_weight_bytes(s);
    EXPECT_EQ(total, m->model.decode_weight_bytes()) << model::format_rungs(r);
  }
}

// A step's traffic: its weights, and the GDN state each layer's recurrence reads and writes
// once in the slot's type, plus, without state-inplace / state-write-fused, the baseline's
// gather (slot -> f32 work) and scatter (work -> slot) and the recurrence on the work copy.
TEST(Program, StepTrafficIsTheWeightsAndTheStateMoves) {
  auto m = tiny(quant::Type::Q8_0);
  const model::HParams& hp = m->model.hp;
  const uint64_t values =
      uint64_t(hp.n_recurrent()) * hp.ssm_n_v_heads * hp.ssm_d_state * hp.ssm_d_state;
  const model::Rungs exact = model::Rungs::exact();
  const struct {
    model::Rungs rungs;
    uint64_t read_per_value, write_per_value;
  } cases[] = {
      // gather: slot -> work; recurrence: work -> work; scatter: work -> slot (f32 slot)
      {model::Rungs::none(), 4 + 4 + 4, 4 + 4 + 4},
      {exact, 4, 4},                                                // slot -> slot
      {exact.with(model::Rung::StateF16), 2, 2},                    // f16 slot -> slot
      {exact.without(model::Rung::StateWriteFused), 4 + 4, 4 + 4},  // slot -> work, scatter
      {exact.with(model::Rung::StateBf16).without(model::Rung::StateInplace), 2 + 4,
       4 + 2},  // gather from a bf16 slot, work -> slot
  };
  for (const auto& c : cases) {
    const model::Program p = model::build_forward(m->model, 1, false, {.rungs = c.rungs});
    uint64_t read = 0, write = 0;
    for (const model::Step& s : p.steps) {
      const model::StepTraffic t = model::step_traffic(p, s);
      read += t.read;
      write += t.write;
      const bool moves_state = s.op == model::Op::StateGather || s.op == model::Op::StateScatter ||
                               s.op == model::Op::GdnRecurrence;
      if (!moves_state) {
        EXPECT_EQ(t.write, 0u) << model::step_kind(s);
      }
    }
    const std::string label = model::format_rungs(c.rungs);
    EXPECT_EQ(read, m->model.decode_weight_bytes() + values * c.read_per_value) << label;
    EXPECT_EQ(write, values * c.write_per_value) << label;
  }
}

// gdn bench --floor's steps: every step but the embedding, each with its own traffic; folding
// an op moves each of its steps' bytes into the step before, so the steps drop by their count
// and the bytes per token stay.
TEST(Program, FloorSpecFoldsTheNamedOpsIntoTheStepBefore) {
  auto m = tiny(quant::Type::Q8_0);
  const model::Program p = model::build_forward(m->model, 1, false);
  const auto count = [&](model::Op op) {
    return std::ranges::count_if(p.steps, [&](const model::Step& s) { return s.op == op; });
  };
  const auto bytes = [](const std::vector<model::FloorStepSpec>& spec) {
    uint64_t b = 0;
    for (const auto& s : spec) b += s.traffic.read + s.traffic.write;
    return b;
  };
  const auto plain = model::floor_spec(p);
  ASSERT_EQ(plain.size(), p.steps.size() - size_t(count(model::Op::Embed)));
  uint64_t traffic = 0;
  for (const model::Step& s : p.steps) {
    const model::StepTraffic t = model::step_traffic(p, s);
    traffic += t.read + t.write;
  }
  EXPECT_EQ(bytes(plain), traffic);

  const std::vector<model::Op> fold = {model::Op::GdnRecurrence, model::Op::Attention};
  const auto folded = model::floor_spec(p, fold);
  ASSERT_GT(count(model::Op::GdnRecurrence), 0);
  ASSERT_GT(count(model::Op::Attention), 0);
  EXPECT_EQ(folded.size(),
            plain.size() - size_t(count(model::Op::GdnRecurrence) + count(model::Op::Attention)));
  EXPECT_EQ(bytes(folded), bytes(plain));
  // The first recurrence lands in the step before it, with its state read and written there.
  // Only step 0 is an embedding, so p.steps[i] is plain[i - 1].
  ASSERT_EQ(count(model::Op::Embed), 1);
  const auto first = std::ranges::find_if(
      p.steps, [](const model::Step& s) { return s.op == model::Op::GdnRecurrence; });
  const size_t before = size_t(first - p.steps.begin()) - 2;
  const model::StepTraffic rec = model::step_traffic(p, *first);
  ASSERT_GT(rec.write, 0u);
  EXPECT_EQ(folded[before].traffic.read, plain[before].traffic.read + rec.read);
  EXPECT_EQ(folded[before].traffic.write, plain[before].traffic.write + rec.write);
  EXPECT_TRUE(folded[before].gemv);  // the qkv GEMV it follows
  EXPECT_EQ(plain[before].kind, model::step_kind(*(first - 1)));
  EXPECT_EQ(folded[before].kind, plain[before].kind + " + " + model::step_kind(*first));
  EXPECT_EQ(model::floor_spec(p, {model::Op::Null}).size(), plain.size());  // none to fold
}

TEST(Program, OpNamesRoundTripAndAnUnknownOneIsRefusedByName) {
  for (int i = 0; i < model::kOpCount; ++i) {
    const auto op = static_cast<model::Op>(i);
    EXPECT_EQ(model::op_from_name(model::op_name(op)), op) << model::op_name(op);
  }
  try {
    model::op_from_name("gdn_recurence");
    FAIL() << "an unknown op name was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown op 'gdn_recurence'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("gdn_recurrence"), std::string::npos) << e.what();
  }
}

// A step's kind names what it does without its layer, so the same work in every layer sums
// into one row of gdn bench --timeline.
TEST(Program, StepKindsNameTheWorkNotTheLayer) {
  auto m = tiny(quant::Type::Q8_0);
  const model::Program p = model::build_forward(m->model, 1, false);
  const auto kind_of = [&](model::Op op, int nth) {
    for (const model::Step& s : p.steps) {
      if (s.op == op && nth-- == 0) return model::step_kind(s);
    }
    return std::string("(none)");
  };
  const auto& hp = m->model.hp;
  const int64_t n_qkvzba = 2 * hp.ssm_n_k_heads * hp.ssm_d_state +
                           2 * hp.ssm_n_v_heads * hp.ssm_d_state + 2 * hp.ssm_n_v_heads;
  // The synthetic model keeps beta and alpha in bf16, as Bonsai's file does.
  EXPECT_EQ(kind_of(model::Op::MatMulFused, 0),
            fmt::format("mat_mul_fused attn_qkv+attn_gate+ssm_beta+ssm_alpha q8_0+bf16 {}->{} "
                        "rms_norm/conv_silu silu(attn_gate)",
                        hp.n_embd, n_qkvzba));
  EXPECT_EQ(kind_of(model::Op::Attention, 0), "attention +prep sigmoid(gate)");
  EXPECT_EQ(kind_of(model::Op::GdnRecurrence, 0), kind_of(model::Op::GdnRecurrence, 1));
  EXPECT_EQ(kind_of(model::Op::GdnRecurrence, 0),
            "gdn_recurrence state-in-slot state-out-slot +gating +l2norm");
  EXPECT_EQ(kind_of(model::Op::Embed, 0), "embed");
  // Types are listed once each, bf16 and f16 told apart.
  model::Matrix a{.name = "blk.0.a.weight", .type = quant::Type::BF16, .n_in = 8, .n_out = 2};
  model::Matrix b{.name = "blk.0.b.weight", .type = quant::Type::F16, .n_in = 8, .n_out = 3};
  model::Matrix c{.name = "blk.0.c.weight", .type = quant::Type::BF16, .n_in = 8, .n_out = 4};
  const model::Step mixed{.op = model::Op::MatMulFused, .mats = {&a, &b, &c}};
  EXPECT_EQ(model::step_kind(mixed), "mat_mul_fused a+b+c bf16+f16 8->9 none/store");
}

// Which epilogues write one output per matrix (the executors size and check outputs by it),
// and that an out-of-range value has no name (matmul_fused refuses it by that).
TEST(Program, EpiloguesSayTheirOutputsAndNames) {
  using model::Epilogue;
  EXPECT_TRUE(model::epilogue_per_matrix(Epilogue::Store));
  EXPECT_TRUE(model::epilogue_per_matrix(Epilogue::ConvSilu));
  EXPECT_FALSE(model::epilogue_per_matrix(Epilogue::AddInto));
  EXPECT_FALSE(model::epilogue_per_matrix(Epilogue::SiluMulPair));
  for (Epilogue e :
       {Epilogue::Store, Epilogue::AddInto, Epilogue::SiluMulPair, Epilogue::ConvSilu}) {
    EXPECT_STRNE(model::epilogue_name(e), "?");
  }
  EXPECT_STREQ(model::epilogue_name(static_cast<Epilogue>(9)), "?");
  EXPECT_STREQ(model::prologue_name(static_cast<model::Prologue>(9)), "?");
}

// What each prologue reads (the executors pass a gate and a norm weight by it).
TEST(Program, ProloguesSayWhatTheyRead) {
  using model::Prologue;
  struct Want {
    Prologue p;
    bool gated, normed, head;
  };
  for (const Want& w :
       {Want{Prologue::None, false, false, false}, Want{Prologue::RmsNorm, false, true, false},
        Want{Prologue::HeadRmsNormSiluGate, true, true, true},
        Want{Prologue::SigmoidGate, true, false, false},
        Want{Prologue::HeadRmsNormMulGate, true, true, true},
        Want{Prologue::MulGate, true, false, false}}) {
    EXPECT_EQ(model::prologue_gated(w.p), w.gated) << model::prologue_name(w.p);
    EXPECT_EQ(model::prologue_normed(w.p), w.normed) << model::prologue_name(w.p);
    EXPECT_EQ(model::prologue_head_normed(w.p), w.head) << model::prologue_name(w.p);
    EXPECT_STRNE(model::prologue_name(w.p), "?");
  }
}

// With norm-gemv-fused a decode activates each gate once where it is written (the qkv
// GEMV's z through SiLU, the attention prep's gate through sigmoid) and the output GEMVs multiply
// by it (HeadRmsNormMulGate, MulGate); without it, no step does either.
TEST(Program, FusedDecodeActivatesEachGateOnce) {
  auto m = tiny(quant::Type::Q8_0);
  const model::Program fused = model::build_forward(m->model, 1, false);
  std::vector<int32_t> silu_bufs, sigmoid_bufs;
  int head_mul = 0, mul = 0;
  for (const model::Step& s : fused.steps) {
    if (s.silu_mat >= 0) silu_bufs.push_back(s.mouts[static_cast<size_t>(s.silu_mat)].buf);
    if (s.gate_sigmoid) sigmoid_bufs.push_back(s.out2.buf);
    EXPECT_NE(s.prologue, model::Prologue::HeadRmsNormSiluGate);
    EXPECT_NE(s.prologue, model::Prologue::SigmoidGate);
    const auto read_after = [&](const std::vector<int32_t>& bufs) {
      return std::find(bufs.begin(), bufs.end(), s.in[1].buf) != bufs.end();
    };
    if (s.prologue == model::Prologue::HeadRmsNormMulGate) {
      ++head_mul;
      EXPECT_TRUE(read_after(silu_bufs)) << model::step_kind(s);
    }
    if (s.prologue == model::Prologue::MulGate) {
      ++mul;
      EXPECT_TRUE(read_after(sigmoid_bufs)) << model::step_kind(s);
    }
  }
  EXPECT_EQ(head_mul, m->model.hp.n_recurrent());
  EXPECT_EQ(mul, m->model.hp.n_attention());
  for (model::Rungs r :
       {model::Rungs::none(), model::Rungs::exact().without(model::Rung::NormGemvFused)}) {
    for (const model::Step& s : model::build_forward(m->model, 1, false, {.rungs = r}).steps) {
      EXPECT_EQ(s.silu_mat, -1) << model::step_kind(s);
      EXPECT_FALSE(s.gate_sigmoid) << model::step_kind(s);
    }
  }
}

// The attention layer's k chain (norm, rope) is marked to run beside the q chain: it reads
// only the k projection and comes before anything that needs q. With norm-gemv-fused a decode
// runs both chains, the split and the KV store inside the attention step instead.
TEST(Program, TheKChainIsMarkedConcurrent) {
  auto m = tiny(quant::Type::Q8_0);
  const model::Program fused = model::build_forward(m->model, 1, false);
  int prep = 0;
  for (const model::Step& s : fused.steps) {
    EXPECT_FALSE(s.concurrent) << model::step_kind(s);
    EXPECT_NE(s.op, model::Op::SplitHeads);
    EXPECT_NE(s.op, model::Op::Rope);
    EXPECT_NE(s.op, model::Op::KvStore);
    prep += s.op == model::Op::Attention && s.fuse_prep;
  }
  EXPECT_EQ(prep, m->model.hp.n_attention());
  for (model::Rungs r :
       {model::Rungs::none(), model::Rungs::exact().without(model::Rung::NormGemvFused)}) {
    const model::Program p = model::build_forward(m->model, 1, false, {.rungs = r});
    int n = 0;
    for (size_t i = 0; i < p.steps.size(); ++i) {
      const model::Step& s = p.steps[i];
      if (!s.concurrent) continue;
      ++n;
      EXPECT_TRUE(s.op == model::Op::RmsNorm || s.op == model::Op::Rope) << model::step_kind(s);
      EXPECT_EQ(p.buffers[static_cast<size_t>(s.out.buf)].name, "k");
      // Nothing before the kv store (the first step that reads k again) touches k.
      for (size_t j = i + 1; j < p.steps.size() && p.steps[j].op != model::Op::KvStore; ++j) {
        if (p.steps[j].concurrent) continue;
        EXPECT_NE(p.steps[j].out.buf, s.out.buf) << model::step_kind(p.steps[j]);
        EXPECT_NE(p.steps[j].in[0].buf, s.out.buf) << model::step_kind(p.steps[j]);
      }
    }
    EXPECT_EQ(n, 2 * m->model.hp.n_attention());
  }
}

TEST(Program, TheCpuBackendHasNoTimeline) {
  auto m = tiny(quant::Type::Q8_0);
  cpu::CpuExecutor ex(m->model, {.n_slots = 1, .n_ctx = 8, .n_threads = 1});
  try {
    ex.timeline(std::span(kIds).first(1), 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu backend has no dispatch timeline"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace gdn
