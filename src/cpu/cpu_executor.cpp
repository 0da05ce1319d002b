#include "cpu/cpu_executor.h"

#include <algorithm>

#include "common/error.h"

namespace gdn::cpu {

using model::Op;

CpuExecutor::CpuExecutor(const model::Model& model, const runtime::ExecutorOptions& opts)
    : model_(model), opts_(opts), pool_(opts.n_threads) {
  if (opts.n_slots <= 0) fail("cpu executor: n_slots must be positive, got {}", opts.n_slots);
  if (opts.n_ctx <= 0) fail("cpu executor: n_ctx must be positive, got {}", opts.n_ctx);
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
  for (size_t il = 0; il < n_layer; ++il) {
    if (hp.is_recurrent(static_cast<int64_t>(il))) {
      s.conv[il].assign(static_cast<size_t>((hp.ssm_conv_kernel - 1) * hp.conv_dim()), 0.0f);
      s.ssm[il].assign(static_cast<size_t>(hp.ssm_n_v_heads * hp.ssm_d_state * hp.ssm_d_state),
                       0.0f);
    } else {
      s.k[il].assign(static_cast<size_t>(opts_.n_ctx * hp.kv_dim()), 0.0f);
      s.v[il].assign(static_cast<size_t>(opts_.n_ctx * hp.kv_dim()), 0.0f);
    }
  }
  s.n_past = 0;
}

void CpuExecutor::copy_slot(int src, int dst) {
  const Slot& from = slot_at(src);
  slot_at(dst);
  if (src != dst) slots_[static_cast<size_t>(dst)] = from;
}

const model::Program& CpuExecutor::program(int64_t n_tokens, bool all_logits) {
  auto& p = programs_[{n_tokens, all_logits}];
  if (!p) p = std::make_unique<model::Program>(model::build_forward(model_, n_tokens, all_logits));
  return *p;
}

void CpuExecutor::forward(std::span<const int32_t> ids, int slot, bool all_logits,
                          std::vector<float>& logits) {
  if (ids.empty()) fail("forward: no tokens given");
  run(program(static_cast<int64_t>(ids.size()), all_logits), ids, slot, logits);
}

void CpuExecutor::run(const model::Program& p, std::span<const int32_t> ids, int slot,
                      std::vector<float>& logits) {
  if (static_cast<int64_t>(ids.size()) != p.n_tokens) {
    fail("program built for {} tokens run with {}", p.n_tokens, ids.size());
  }
  slot_at(slot);
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.n_past + p.n_tokens > opts_.n_ctx) {
    fail("slot {}: {} cached + {} new tokens exceed the context of {}", slot, s.n_past, p.n_tokens,
         opts_.n_ctx);
  }
  buffers_.resize(p.buffers.size());
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    buffers_[i].resize(static_cast<size_t>(p.buffers[i].rows * p.buffers[i].cols));
  }
  for (const model::Step& st : p.steps) step(st, p, ids.data(), s);
  s.n_past += p.n_tokens;
  last_dispatches_ = static_cast<int64_t>(p.steps.size());
  const std::vector<float>& out = buffers_[static_cast<size_t>(p.logits)];
  logits.assign(out.begin(), out.end());
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
    case Op::ConvStep:
      conv_step(in(0), view(p, s.out), s.vec->data(), hp.ssm_conv_kernel, layer(slot.conv));
      return;
    case Op::StateGather: {
      const std::vector<float>& st = slot.ssm.at(static_cast<size_t>(s.layer));
      std::copy(st.begin(), st.end(), view(p, s.out).data);
      return;
    }
    case Op::StateScatter: {
      std::vector<float>& st = slot.ssm.at(static_cast<size_t>(s.layer));
      const float* src = in(0).data;
      std::copy(src, src + st.size(), st.begin());
      return;
    }
    case Op::GdnRecurrence: {
      float* state = s.out2.valid() ? view(p, s.out2).data : layer(slot.ssm);
      gdn_recurrence(in(0), in(1), in(2), in(3), in(4), view(p, s.out), state, hp.ssm_n_k_heads,
                     hp.ssm_n_v_heads, s.head_dim);
      return;
    }
    case Op::Rope:
      rope(view(p, s.out), s.head_dim, hp.n_rot, hp.rope_theta, slot.n_past);
      return;
    case Op::KvStore: {
      const Rows k = in(0), v = in(1);
      float* kc = layer(slot.k) + slot.n_past * hp.kv_dim();
      float* vc = layer(slot.v) + slot.n_past * hp.kv_dim();
      for (int64_t t = 0; t < k.rows; ++t) {
        std::copy(k.row(t), k.row(t) + k.cols, kc + t * hp.kv_dim());
        std::copy(v.row(t), v.row(t) + v.cols, vc + t * hp.kv_dim());
      }
      return;
    }
    case Op::Attention:
      attention(in(0), layer(slot.k), layer(slot.v), view(p, s.out), hp.n_head, hp.n_head_kv,
                s.head_dim, slot.n_past);
      return;
    case Op::CopyRows: {
      const Rows x = in(0), y = view(p, s.out);
      for (int64_t t = 0; t < y.rows; ++t) {
        std::copy(x.row(s.row0 + t), x.row(s.row0 + t) + x.cols, y.row(t));
      }
      return;
    }
  }
  fail("cpu executor: op {} is not implemented", model::op_name(s.op));
}

}  // namespace gdn::cpu
