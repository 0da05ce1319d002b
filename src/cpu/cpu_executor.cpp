#include "cpu/cpu_executor.h"

#include <algorithm>
#include <new>

#include "common/error.h"
#include "quant/quant.h"

namespace gdn::cpu {

using model::Op;

CpuExecutor::CpuExecutor(const model::Model& model, const runtime::ExecutorOptions& opts)
    : Executor(opts), model_(model), opts_(opts), pool_(opts.n_threads) {
  slots_.resize(static_cast<size_t>(opts.n_slots));
  for (int s = 0; s < opts.n_slots; ++s) reset_slot(s);
}

const Slot& CpuExecutor::slot_at(int slot) const {
  if (slot < 0 || slot >= static_cast<int>(slots_.size())) {
    fail("slot {} out of range [0, {})", slot, slots_.size());
  }
  return slots_[static_cast<size_t>(slot)];
}

void CpuExecutor::reset_slot(int slot) {
  slot_at(slot);
  const model::HParams& hp = model_.hp;
  Slot& s = slots_[static_cast<size_t>(slot)];
  const size_t n_layer = static_cast<size_t>(hp.n_layer);
  s.k.assign(n_layer, {});
  s.v.assign(n_layer, {});
  s.conv.assign(n_layer, {});
  s.ssm.assign(n_layer, {});
  for (size_t il = 0; il < n_layer; ++il) {  // the KV cache grows as positions are used
    if (hp.is_recurrent(static_cast<int64_t>(il))) {
      s.conv[il].assign(static_cast<size_t>((hp.ssm_conv_kernel - 1) * hp.conv_dim()), 0.0f);
      s.ssm[il].assign(static_cast<size_t>(hp.ssm_n_v_heads * hp.ssm_d_state * hp.ssm_d_state),
                       0.0f);
    }
  }
  s.n_past = 0;
}

// Room for `positions` in every attention layer's K and V cache of the slot. The cache grows
// with what a sequence uses, doubling up to the context, not by the context up front: -c 2^24
// on the tiny model would be 16 GiB of zeros per layer before the first token.
void CpuExecutor::reserve_kv(Slot& s, int slot, int64_t positions) {
  const model::HParams& hp = model_.hp;
  const auto need = static_cast<size_t>(positions * hp.kv_dim());
  try {
    for (size_t il = 0; il < s.k.size(); ++il) {
      if (hp.is_recurrent(static_cast<int64_t>(il)) || s.k[il].size() >= need) continue;
      const size_t cap = std::min(std::max(need, 2 * s.k[il].size()),
                                  static_cast<size_t>(opts_.n_ctx * hp.kv_dim()));
      for (std::vector<float>* c : {&s.k[il], &s.v[il]}) {
        c->reserve(cap);
        c->resize(need, 0.0f);
      }
    }
  } catch (const std::bad_alloc&) {
    const double kv_gib =
        8.0 * double(positions) * double(hp.kv_dim()) * double(hp.n_attention()) / double(1u << 30);
    fail(
        "cpu executor: cannot grow slot {}'s KV cache to {} positions ({:.2f} GiB; a shorter "
        "sequence needs less)",
        slot, positions, kv_gib);
  }
}

void CpuExecutor::copy_slot(int src, int dst) {
  const Slot& from = slot_at(src);
  slot_at(dst);
  if (src != dst) slots_[static_cast<size_t>(dst)] = from;
}

void CpuExecutor::set_rungs(model::Rungs rungs) {
  const bool reset = rungs.state_type() != build_.rungs.state_type();
  build_.rungs = rungs;
  if (reset) {
    for (int s = 0; s < static_cast<int>(slots_.size()); ++s) reset_slot(s);
  }
}

const model::Program& CpuExecutor::program(int64_t n_tokens, bool all_logits) {
  auto& p = programs_[{n_tokens, all_logits, build_.rungs, build_.null_dispatches}];
  if (!p) {
    p = std::make_unique<model::Program>(
        model::build_forward(model_, n_tokens, all_logits, build_));
  }
  return *p;
}

// A reduced-precision state is stored rounded (f16/bf16, round-to-nearest-even): the CUDA
// executor's slot storage, emulated on f32 values.
void CpuExecutor::round_state(std::vector<float>& state) const {
  switch (build_.rungs.state_type()) {
    case model::StateType::F32:
      return;
    case model::StateType::F16:
      for (float& v : state) v = quant::fp16_to_f32(quant::f32_to_fp16(v));
      return;
    case model::StateType::BF16:
      for (float& v : state) v = quant::bf16_to_f32(quant::f32_to_bf16(v));
      return;
  }
}

std::span<const float> CpuExecutor::forward_view(std::span<const int32_t> ids, int slot,
                                                 bool all_logits) {
  if (ids.empty()) fail("forward: no tokens given");
  return run(program(static_cast<int64_t>(ids.size()), all_logits), ids, slot);
}

std::span<const float> CpuExecutor::run(const model::Program& p, std::span<const int32_t> ids,
                                        int slot) {
  if (static_cast<int64_t>(ids.size()) != p.n_tokens) {
    fail("program built for {} tokens run with {}", p.n_tokens, ids.size());
  }
  slot_at(slot);
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.n_past + p.n_tokens > opts_.n_ctx) {
    fail("slot {}: {} cached + {} new tokens exceed the context of {}", slot, s.n_past, p.n_tokens,
         opts_.n_ctx);
  }
  reserve_kv(s, slot, s.n_past + p.n_tokens);
  buffers_.resize(p.buffers.size());
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    buffers_[i].resize(static_cast<size_t>(p.buffers[i].rows * p.buffers[i].cols));
  }
  last_count_ = {};
  for (const model::Step& st : p.steps) {
    step(st, p, ids.data(), s);
    last_count_.add(st.op, st.op == Op::Null ? 0 : 1);
  }
  s.n_past += p.n_tokens;
  return buffers_[static_cast<size_t>(p.logits)];
}

Rows CpuExecutor::view(const model::Program& p, const model::View& v) {
  const model::BufferSpec& b = p.buffers[static_cast<size_t>(v.buf)];
  return {buffers_[static_cast<size_t>(v.buf)].data() + v.col, b.rows, v.width, b.cols};
}

void CpuExecutor::step(const model::Step& s, const model::Program& p, const int32_t* ids,
                       Slot& slot) {
  const model::HParams& hp = model_.hp;
  auto in = [&](int i) { return view(p, s.in[static_cast<size_t>(i)]); };
  auto layer = [&](std::vector<std::vector<float>>& per_layer) {
    return per_layer.at(static_cast<size_t>(s.layer)).data();
  };
  switch (s.op) {
    case Op::Embed:
      embed(model_.token_embd, ids, view(p, s.out));
      return;
    case Op::RmsNorm: {
      const int64_t chunk = s.head_dim > 0 ? s.head_dim : s.out.width;
      rms_norm(in(0), view(p, s.out), s.vec->data(), chunk, s.eps);
      return;
    }
    case Op::MatMul:
      mat_mul(*s.w, in(0), view(p, s.out), pool_, opts_.q8_activations);
      return;
    case Op::Add:
      binary(Binary::Add, in(0), in(0), view(p, s.out));
      return;
    case Op::AddVec:
      broadcast(Broadcast::Add, in(0), s.vec->data(), view(p, s.out));
      return;
    case Op::MulVec:
      broadcast(Broadcast::Mul, in(0), s.vec->data(), view(p, s.out));
      return;
    case Op::Sigmoid:
      unary(Unary::Sigmoid, in(0), view(p, s.out));
      return;
    case Op::Softplus:
      unary(Unary::Softplus, in(0), view(p, s.out));
      return;
    case Op::Silu:
      unary(Unary::Silu, in(0), view(p, s.out));
      return;
    case Op::SiluMul:
      binary(Binary::SiluMul, in(0), in(1), view(p, s.out));
      return;
    case Op::SigmoidMul:
      binary(Binary::SigmoidMul, in(0), in(1), view(p, s.out));
      return;
    case Op::L2NormHeads:
      l2_norm(in(0), view(p, s.out), s.head_dim, s.eps);
      return;
    case Op::SplitHeads:
      split_heads(in(0), view(p, s.out), view(p, s.out2), s.head_dim);
      return;
    case Op::ConvStep: {
      const Rows y = view(p, s.out);
      if (s.conv_window) {
        // The window's first K-1 rows are the history: run the step on a copy of them.
        const Rows w = in(0);
        const int64_t hist = hp.ssm_conv_kernel - 1;
        std::vector<float> history(static_cast<size_t>(hist * w.cols));
        for (int64_t r = 0; r < hist; ++r)
          std::copy(w.row(r), w.row(r) + w.cols, &history[r * w.cols]);
        conv_step({w.row(hist), w.rows - hist, w.cols, w.ld}, y, s.vec->data(), hp.ssm_conv_kernel,
                  history.data());
      } else {
        conv_step(in(0), y, s.vec->data(), hp.ssm_conv_kernel, layer(slot.conv));
      }
      if (s.fuse_silu) unary(Unary::Silu, y, y);
      return;
    }
    case Op::ConvConcat: {
      const std::vector<float>& st = slot.conv.at(static_cast<size_t>(s.layer));
      const Rows x = in(0), y = view(p, s.out);
      const int64_t hist = hp.ssm_conv_kernel - 1;
      for (int64_t r = 0; r < hist; ++r)
        std::copy(&st[r * y.cols], &st[(r + 1) * y.cols], y.row(r));
      for (int64_t r = 0; r < x.rows; ++r) std::copy(x.row(r), x.row(r) + x.cols, y.row(hist + r));
      return;
    }
    case Op::ConvSave: {
      std::vector<float>& st = slot.conv.at(static_cast<size_t>(s.layer));
      const Rows x = in(0);
      for (int64_t r = 0; r < hp.ssm_conv_kernel - 1; ++r) {
        std::copy(x.row(s.row0 + r), x.row(s.row0 + r) + x.cols, &st[r * x.cols]);
      }
      return;
    }
    case Op::StateGather: {
      const std::vector<float>& st = slot.ssm.at(static_cast<size_t>(s.layer));
      std::copy(st.begin(), st.end(), view(p, s.out).data);
      return;
    }
    case Op::StateScatter: {
      std::vector<float>& st = slot.ssm.at(static_cast<size_t>(s.layer));
      const float* src = in(0).data;
      std::copy(src, src + st.size(), st.begin());
      round_state(st);
      return;
    }
    case Op::GdnRecurrence:
      gdn_step(s, p, slot);
      return;
    case Op::Rope:
      rope(view(p, s.out), s.head_dim, hp.n_rot, hp.rope_theta, slot.n_past);
      return;
    case Op::KvStore:
      kv_store(in(0), in(1), s.layer, slot);
      return;
    case Op::Attention:
      attention(s.fuse_prep ? attn_prep(s, p, slot) : in(0), layer(slot.k), layer(slot.v),
                view(p, s.out), hp.n_head, hp.n_head_kv, s.head_dim, slot.n_past);
      return;
    case Op::CopyRows: {
      const Rows x = in(0), y = view(p, s.out);
      for (int64_t t = 0; t < y.rows; ++t) {
        std::copy(x.row(s.row0 + t), x.row(s.row0 + t) + x.cols, y.row(t));
      }
      return;
    }
    case Op::MatMulFused:
      fused_matmul(s, p, slot);
      return;
    case Op::Null:
      return;
  }
  fail("cpu executor: op {} is not implemented", model::op_name(s.op));
}

namespace {

// Rows over a scratch vector of rows × cols floats.
Rows scratch(std::vector<float>& v, int64_t rows, int64_t cols) {
  v.resize(static_cast<size_t>(rows * cols));
  return {v.data(), rows, cols, cols};
}

Rows copy_of(Rows x, std::vector<float>& v) {
  const Rows y = scratch(v, x.rows, x.cols);
  for (int64_t r = 0; r < x.rows; ++r) std::copy(x.row(r), x.row(r) + x.cols, y.row(r));
  return y;
}

}  // namespace

// The recurrence with its rung variants, composed from the unfused reference ops: the fused
// CUDA kernel must equal exactly this composition.
void CpuExecutor::gdn_step(const model::Step& s, const model::Program& p, Slot& slot) {
  const model::HParams& hp = model_.hp;
  Rows q = view(p, s.in[0]), k = view(p, s.in[1]), g = view(p, s.in[3]), b = view(p, s.in[4]);
  if (s.fuse_l2norm) {
    q = copy_of(q, tmp_[0]);
    k = copy_of(k, tmp_[1]);
    l2_norm(q, q, s.head_dim, s.eps);
    l2_norm(k, k, s.head_dim, s.eps);
  }
  if (s.fuse_gating) {
    b = copy_of(b, tmp_[2]);
    g = copy_of(g, tmp_[3]);
    unary(Unary::Sigmoid, b, b);
    broadcast(Broadcast::Add, g, s.vec->data(), g);
    unary(Unary::Softplus, g, g);
    broadcast(Broadcast::Mul, g, s.vec2->data(), g);
  }
  std::vector<float>& slot_state = slot.ssm.at(static_cast<size_t>(s.layer));
  const int64_t n = static_cast<int64_t>(slot_state.size());
  float* in_state = s.state_in_slot ? slot_state.data() : view(p, s.out2).data;
  float* out_state = s.state_out_slot ? slot_state.data() : view(p, s.out2).data;
  if (in_state != out_state) std::copy(in_state, in_state + n, out_state);
  gdn_recurrence(q, k, view(p, s.in[2]), g, b, view(p, s.out), out_state, hp.ssm_n_k_heads,
                 hp.ssm_n_v_heads, s.head_dim);
  if (s.state_out_slot) round_state(slot_state);
}

// k and v rows into the slot's cache of `layer` at its position.
void CpuExecutor::kv_store(Rows k, Rows v, int64_t layer, Slot& slot) {
  const int64_t kv_dim = model_.hp.kv_dim();
  float* kc = slot.k.at(static_cast<size_t>(layer)).data() + slot.n_past * kv_dim;
  float* vc = slot.v.at(static_cast<size_t>(layer)).data() + slot.n_past * kv_dim;
  for (int64_t t = 0; t < k.rows; ++t) {
    std::copy(k.row(t), k.row(t) + k.cols, kc + t * kv_dim);
    std::copy(v.row(t), v.row(t) + v.cols, vc + t * kv_dim);
  }
}

// Attention's fused prep composed from the unfused reference ops (what the fused CUDA kernel
// equals): q (returned) and k are normalised and rotated in copies, as the fused kernel leaves
// both untouched.
Rows CpuExecutor::attn_prep(const model::Step& s, const model::Program& p, Slot& slot) {
  const model::HParams& hp = model_.hp;
  const Rows qg = view(p, s.in[0]);
  const Rows q = scratch(tmp_[0], qg.rows, qg.cols / 2);
  const Rows gate = view(p, s.out2);
  split_heads(qg, q, gate, s.head_dim);
  if (s.gate_sigmoid) unary(Unary::Sigmoid, gate, gate);
  rms_norm(q, q, s.vec->data(), s.head_dim, s.eps);
  rope(q, s.head_dim, hp.n_rot, hp.rope_theta, slot.n_past);
  const Rows k = copy_of(view(p, s.in[1]), tmp_[1]);
  rms_norm(k, k, s.vec2->data(), s.head_dim, s.eps);
  rope(k, s.head_dim, hp.n_rot, hp.rope_theta, slot.n_past);
  kv_store(k, view(p, s.in[2]), s.layer, slot);
  return q;
}

// MatMulFused composed from the unfused reference ops (what the fused CUDA kernel equals).
void CpuExecutor::fused_matmul(const model::Step& s, const model::Program& p, Slot& slot) {
  const Rows x0 = view(p, s.in[0]);
  // The builder never lets an output alias the input (the CUDA kernels refuse it), so without
  // a prologue x is read in place.
  const Rows x = s.prologue == model::Prologue::None ? x0 : scratch(tmp_[0], x0.rows, x0.cols);
  const bool normed = model::prologue_normed(s.prologue);
  if (normed) {
    rms_norm(x0, x, s.vec->data(), model::prologue_head_normed(s.prologue) ? s.head_dim : x0.cols,
             s.eps);
  }
  if (model::prologue_gated(s.prologue)) {
    const Binary gate_op = s.prologue == model::Prologue::HeadRmsNormSiluGate ? Binary::SiluMul
                           : s.prologue == model::Prologue::SigmoidGate       ? Binary::SigmoidMul
                                                                              : Binary::Mul;
    binary(gate_op, normed ? x : x0, view(p, s.in[1]), x);
  }
  const int n = s.n_mats();
  switch (s.epilogue) {
    case model::Epilogue::Store:
    case model::Epilogue::ConvSilu: {
      // ConvSilu: matrix 0's product goes through the slot's conv step and SiLU.
      const bool conv = s.epilogue == model::Epilogue::ConvSilu;
      const Rows pre = conv ? scratch(tmp_[1], x.rows, s.mats[0]->n_out) : Rows{};
      for (int i = 0; i < n; ++i) {
        const size_t k = static_cast<size_t>(i);
        mat_mul(*s.mats[k], x, conv && i == 0 ? pre : view(p, s.mouts[k]), pool_,
                opts_.q8_activations);
      }
      if (conv) {
        const Rows y = view(p, s.mouts[0]);
        conv_step(pre, y, s.vec2->data(), model_.hp.ssm_conv_kernel,
                  slot.conv.at(static_cast<size_t>(s.layer)).data());
        unary(Unary::Silu, y, y);
      }
      if (s.silu_mat >= 0) {
        const Rows g = view(p, s.mouts[static_cast<size_t>(s.silu_mat)]);
        unary(Unary::Silu, g, g);
      }
      return;
    }
    case model::Epilogue::AddInto: {
      const Rows y = scratch(tmp_[1], x.rows, s.mats[0]->n_out);
      mat_mul(*s.mats[0], x, y, pool_, opts_.q8_activations);
      binary(Binary::Add, y, y, view(p, s.mouts[0]));
      return;
    }
    case model::Epilogue::SiluMulPair: {
      const Rows gate = scratch(tmp_[1], x.rows, s.mats[0]->n_out);
      const Rows up = scratch(tmp_[2], x.rows, s.mats[1]->n_out);
      mat_mul(*s.mats[0], x, gate, pool_, opts_.q8_activations);
      mat_mul(*s.mats[1], x, up, pool_, opts_.q8_activations);
      binary(Binary::SiluMul, up, gate, view(p, s.mouts[0]));
      return;
    }
  }
}

}  // namespace gdn::cpu
