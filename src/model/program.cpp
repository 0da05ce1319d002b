#include "model/program.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "quant/types.h"

namespace gdn::model {

const char* op_name(Op op) {
  switch (op) {
    case Op::Embed:
      return "embed";
    case Op::RmsNorm:
      return "rms_norm";
    case Op::MatMul:
      return "mat_mul";
    case Op::Add:
      return "add";
    case Op::AddVec:
      return "add_vec";
    case Op::MulVec:
      return "mul_vec";
    case Op::Sigmoid:
      return "sigmoid";
    case Op::Softplus:
      return "softplus";
    case Op::Silu:
      return "silu";
    case Op::SiluMul:
      return "silu_mul";
    case Op::SigmoidMul:
      return "sigmoid_mul";
    case Op::L2NormHeads:
      return "l2_norm_heads";
    case Op::SplitHeads:
      return "split_heads";
    case Op::ConvStep:
      return "conv_step";
    case Op::StateGather:
      return "state_gather";
    case Op::StateScatter:
      return "state_scatter";
    case Op::GdnRecurrence:
      return "gdn_recurrence";
    case Op::Rope:
      return "rope";
    case Op::KvStore:
      return "kv_store";
    case Op::Attention:
      return "attention";
    case Op::CopyRows:
      return "copy_rows";
    case Op::ConvConcat:
      return "conv_concat";
    case Op::ConvSave:
      return "conv_save";
    case Op::MatMulFused:
      return "mat_mul_fused";
    case Op::Null:
      return "null";
  }
  return "?";
}

Op op_from_name(std::string_view name) {
  std::string known;
  for (int i = 0; i < kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    if (name == op_name(op)) return op;
    known += fmt::format("{}{}", i ? ", " : "", op_name(op));
  }
  fail("unknown op '{}' (ops: {})", name, known);
}

int Step::n_mats() const {
  int n = 0;
  while (n < static_cast<int>(mats.size()) && mats[static_cast<size_t>(n)]) ++n;
  return n;
}

namespace {

// "blk.3.attn_qkv.weight" -> "attn_qkv": the matrix's role in any layer.
std::string_view matrix_role(std::string_view name) {
  if (name.starts_with("blk.")) {
    const size_t dot = name.find('.', 4);
    if (dot != std::string_view::npos) name.remove_prefix(dot + 1);
  }
  if (name.ends_with(".weight")) name.remove_suffix(7);
  return name;
}

// The variant flags of a recurrence or conv step (" state-in-slot +gating", " +silu").
std::string step_flags(const Step& s) {
  std::string f;
  if (s.op == Op::GdnRecurrence) {
    f += fmt::format("{}{}{}{}", s.state_in_slot ? " state-in-slot" : "",
                     s.state_out_slot ? " state-out-slot" : "", s.fuse_gating ? " +gating" : "",
                     s.fuse_l2norm ? " +l2norm" : "");
  }
  if (s.fuse_silu) f += " +silu";
  if (s.fuse_prep) f += " +prep";
  if (s.silu_mat >= 0 && s.mats[static_cast<size_t>(s.silu_mat)]) {
    f += fmt::format(" silu({})", matrix_role(s.mats[static_cast<size_t>(s.silu_mat)]->name));
  }
  if (s.gate_sigmoid) f += " sigmoid(gate)";
  return f;
}

}  // namespace

std::string step_kind(const Step& s) {
  std::string k = op_name(s.op);
  if (s.w) {
    k += fmt::format(" {} {} {}->{}", matrix_role(s.w->name), quant::type_info(s.w->type).name,
                     s.w->n_in, s.w->n_out);
  }
  const int n = s.n_mats();
  if (n > 0) {
    int64_t n_out = 0;
    std::vector<quant::Type> types;  // distinct, in matrix order
    for (int i = 0; i < n; ++i) {
      const Matrix& m = *s.mats[static_cast<size_t>(i)];
      k += fmt::format("{}{}", i == 0 ? " " : "+", matrix_role(m.name));
      n_out += m.n_out;
      if (std::find(types.begin(), types.end(), m.type) == types.end()) types.push_back(m.type);
    }
    for (size_t i = 0; i < types.size(); ++i) {
      k += fmt::format("{}{}", i == 0 ? " " : "+", quant::type_info(types[i]).name);
    }
    k += fmt::format(" {}->{} {}/{}", s.mats[0]->n_in, n_out, prologue_name(s.prologue),
                     epilogue_name(s.epilogue));
  }
  return k + step_flags(s);
}

uint64_t step_weight_bytes(const Step& s) {
  uint64_t total = s.w ? s.w->bytes() : 0;
  for (int i = 0; i < s.n_mats(); ++i) total += s.mats[static_cast<size_t>(i)]->bytes();
  return total;
}

StepTraffic step_traffic(const Program& p, const Step& s) {
  const HParams& hp = p.model->hp;
  const uint64_t values = uint64_t(hp.ssm_n_v_heads) * hp.ssm_d_state * hp.ssm_d_state;
  const uint64_t slot = values * state_type_bytes(p.rungs.state_type());
  const uint64_t work = values * sizeof(float);
  StepTraffic t{.read = step_weight_bytes(s)};
  if (s.op == Op::StateGather) {
    t.read += slot;
    t.write += work;
  } else if (s.op == Op::StateScatter) {
    t.read += work;
    t.write += slot;
  } else if (s.op == Op::GdnRecurrence) {
    t.read += s.state_in_slot ? slot : work;
    t.write += s.state_out_slot ? slot : work;
  }
  return t;
}

std::vector<FloorStepSpec> floor_spec(const Program& p, const std::vector<Op>& fold) {
  std::vector<FloorStepSpec> out;
  for (const Step& s : p.steps) {
    if (s.op == Op::Embed || s.op == Op::Null) continue;
    const StepTraffic t = step_traffic(p, s);
    const bool gemv = s.op == Op::MatMul || s.op == Op::MatMulFused;
    if (!out.empty() && std::ranges::find(fold, s.op) != fold.end()) {
      FloorStepSpec& into = out.back();
      into.traffic.read += t.read;
      into.traffic.write += t.write;
      into.gemv = into.gemv || gemv;
      into.kind += " + " + step_kind(s);
    } else {
      out.push_back({t, gemv, step_kind(s)});
    }
  }
  return out;
}

namespace {

// q and k are L2-normalised with this epsilon inside the sum, as HF's torch path does.
constexpr float kL2NormEps = 1e-6f;

class Builder {
 public:
  Builder(const Model& m, int64_t n_tokens, bool all_logits, const BuildOptions& o)
      : m_(m), hp_(m.hp), T_(n_tokens), o_(o) {
    p_.n_tokens = n_tokens;
    p_.all_logits = all_logits;
    p_.rungs = o.rungs;
    p_.model = &m;
    // Decode only (see build_forward).
    fused_gemv_ = n_tokens == 1 && on(Rung::NormGemvFused);
  }

  Program build() {
    const View h = buf("h", hp_.n_embd);
    emit({.op = Op::Embed, .out = h});
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      const Layer& L = m_.layers[static_cast<size_t>(il)];
      if (L.recurrent) {
        gdn(L, il, h);
      } else {
        attention(L, il, h);
      }
      ffn(L, h);
    }
    output(h);
    if (T_ == 1) {
      for (int i = 0; i < o_.null_dispatches; ++i) emit({.op = Op::Null});
    }
    return std::move(p_);
  }

 private:
  bool on(Rung r) const { return o_.rungs.has(r); }

  void gdn(const Layer& L, int64_t il, View h) {
    const GdnWeights& g = L.gdn;
    const int64_t qk = hp_.ssm_qk_dim(), inner = hp_.ssm_inner(), Hv = hp_.ssm_n_v_heads;
    const int64_t dk = hp_.ssm_d_state;
    // With both rungs, a decode's conv runs in the qkv GEMV's epilogue: the qkv rows never
    // leave the kernel, and the conv's own dispatch is gone.
    const bool conv_in_gemv =
        fused_gemv_ && on(Rung::ConvInplace) && hp_.ssm_conv_kernel <= kMaxFusedConvKernel;
    // Fused, the projection stores silu(z) (matrix 1), which ssm_out's prologue multiplies by:
    // the activation runs once per element, not in each of ssm_out's CTAs. Measured (H200,
    // 2026-12-01, gdn bench --timeline): ssm_out 9.46 -> 8.68 µs a step, the projection 12.69
    // -> 13.00 (its epilogue's SiLU), -22 µs/token net.
    const std::array<View, 4> proj = project(h, L.attn_norm, {&g.qkv, &g.gate, &g.beta, &g.alpha},
                                             {conv_in_gemv ? "conv" : "qkv", "z", "beta", "alpha"},
                                             conv_in_gemv ? &g.conv : nullptr, il, 1);
    const View z = proj[1], b = proj[2], a = proj[3];
    View conv = proj[0];
    if (!conv_in_gemv) {
      conv = buf("conv", hp_.conv_dim());
      conv_step(g, il, proj[0], conv);
    }
    const View q = sub(conv, 0, qk), k = sub(conv, qk, qk), v = sub(conv, 2 * qk, inner);
    Step rec{.op = Op::GdnRecurrence,
             .out = buf("gdn_out", inner),
             .in = {q, k, v, a, b},
             .layer = il,
             .head_dim = dk};
    // Decode only: in a prefill the GDN kernel walks the tokens one after another, and
    // normalising q and k there put two more reductions on that serial path (measured, H200,
    // Bonsai pp512: 1490 -> 1377 tok/s), where the separate norm kernels run in parallel.
    if (on(Rung::L2NormFused) && T_ == 1) {
      rec.fuse_l2norm = true;
      rec.eps = kL2NormEps;
    } else {
      emit({.op = Op::L2NormHeads, .out = q, .in = {q}, .head_dim = dk, .eps = kL2NormEps});
      emit({.op = Op::L2NormHeads, .out = k, .in = {k}, .head_dim = dk, .eps = kL2NormEps});
    }
    if (on(Rung::GatingFused)) {
      rec.fuse_gating = true;
      rec.vec = &g.dt_bias;
      rec.vec2 = &g.a;
    } else {
      emit({.op = Op::Sigmoid, .out = b, .in = {b}});
      emit({.op = Op::AddVec, .out = a, .in = {a}, .vec = &g.dt_bias});
      emit({.op = Op::Softplus, .out = a, .in = {a}});
      emit({.op = Op::MulVec, .out = a, .in = {a}, .vec = &g.a});
    }
    // Baseline, as llama.cpp runs it: state copied out of the slot, updated, copied back.
    rec.state_in_slot = on(Rung::StateInplace);
    rec.state_out_slot = on(Rung::StateWriteFused);
    if (!rec.state_in_slot || !rec.state_out_slot) rec.out2 = buf("gdn_state", Hv * dk * dk, 1);
    if (!rec.state_in_slot) emit({.op = Op::StateGather, .out = rec.out2, .layer = il});
    emit(rec);
    if (!rec.state_out_slot) emit({.op = Op::StateScatter, .in = {rec.out2}, .layer = il});

    output_projection(
        g.out, rec.out, h,
        {.prologue = fused_gemv_ ? Prologue::HeadRmsNormMulGate : Prologue::HeadRmsNormSiluGate,
         .gate = z,
         .norm = &g.norm,
         .head_dim = dk});
  }

  // Baseline, as llama.cpp runs it: [state; x] concatenated into a window, the conv over the
  // window, the window's last K-1 rows copied back as the state, then SiLU.
  void conv_step(const GdnWeights& g, int64_t il, View qkv, View conv) {
    if (on(Rung::ConvInplace)) {
      emit({.op = Op::ConvStep,
            .out = conv,
            .in = {qkv},
            .vec = &g.conv,
            .layer = il,
            .fuse_silu = true});
      return;
    }
    const View window = buf("conv_window", hp_.conv_dim(), T_ + hp_.ssm_conv_kernel - 1);
    emit({.op = Op::ConvConcat, .out = window, .in = {qkv}, .layer = il});
    emit({.op = Op::ConvStep,
          .out = conv,
          .in = {window},
          .vec = &g.conv,
          .layer = il,
          .conv_window = true});
    emit({.op = Op::ConvSave, .in = {window}, .layer = il, .row0 = T_});
    emit({.op = Op::Silu, .out = conv, .in = {conv}});
  }

  void attention(const Layer& L, int64_t il, View h) {
    const AttentionWeights& A = L.attn;
    const int64_t D = hp_.head_dim;
    const std::array<View, 4> proj =
        project(h, L.attn_norm, {&A.q, &A.k, &A.v}, {"q_gate", "k", "v"});
    const View qg = proj[0], k = proj[1], v = proj[2];
    const View gate = buf("attn_gate", hp_.q_dim());
    // The fused prep stores sigmoid(gate), which attn_output's prologue multiplies by
    // (MulGate). Measured (H200, 2026-12-01, timeline): attn_output 7.22 -> 6.62 µs, the prep
    // (then its own step) 4.49 -> 4.94, then 3.03 once it loaded the gate with the normalised
    // head (attention.cu).
    const bool prep = fused_gemv_ && D <= kMaxAttnPrepHeadDim;
    const View att = buf("attn_out", hp_.q_dim());
    if (prep) {
      emit({.op = Op::Attention,
            .out = att,
            .in = {qg, k, v},
            .out2 = gate,
            .vec = &A.q_norm,
            .vec2 = &A.k_norm,
            .layer = il,
            .head_dim = D,
            .eps = hp_.rms_eps,
            .fuse_prep = true,
            .gate_sigmoid = true});
    } else {
      const View q = buf("q", hp_.q_dim());
      unfused_attn_prep(A, il, qg, k, v, q, gate);
      emit({.op = Op::Attention, .out = att, .in = {q}, .layer = il, .head_dim = D});
    }
    output_projection(A.o, att, h,
                      {.prologue = prep ? Prologue::MulGate : Prologue::SigmoidGate, .gate = gate});
  }

  // What the fused prep does, one step per op as llama.cpp runs it.
  void unfused_attn_prep(const AttentionWeights& A, int64_t il, View qg, View k, View v, View q,
                         View gate) {
    const int64_t D = hp_.head_dim;
    // k's chain needs only the projection: it may run beside q's (Step::concurrent).
    emit({.op = Op::RmsNorm,
          .out = k,
          .in = {k},
          .vec = &A.k_norm,
          .head_dim = D,
          .eps = hp_.rms_eps,
          .concurrent = true});
    emit({.op = Op::Rope, .out = k, .in = {k}, .head_dim = D, .concurrent = true});
    emit({.op = Op::SplitHeads, .out = q, .in = {qg}, .out2 = gate, .head_dim = D});
    emit({.op = Op::RmsNorm,
          .out = q,
          .in = {q},
          .vec = &A.q_norm,
          .head_dim = D,
          .eps = hp_.rms_eps});
    emit({.op = Op::Rope, .out = q, .in = {q}, .head_dim = D});
    emit({.op = Op::KvStore, .in = {k, v}, .layer = il});
  }

  void ffn(const Layer& L, View h) {
    if (fused_gemv_) {
      const View up = buf("ffn_up", L.ffn_up.n_out);
      emit({.op = Op::MatMulFused,
            .in = {h},
            .vec = &L.post_norm,
            .eps = hp_.rms_eps,
            .prologue = Prologue::RmsNorm,
            .epilogue = Epilogue::SiluMulPair,
            .mats = {&L.ffn_gate, &L.ffn_up},
            .mouts = {up}});
      emit({.op = Op::MatMulFused,
            .in = {up},
            .epilogue = Epilogue::AddInto,
            .mats = {&L.ffn_down},
            .mouts = {h}});
      return;
    }
    const View x = buf("x", hp_.n_embd);
    emit({.op = Op::RmsNorm, .out = x, .in = {h}, .vec = &L.post_norm, .eps = hp_.rms_eps});
    const View gate = matmul(L.ffn_gate, x, "ffn_gate");
    const View up = matmul(L.ffn_up, x, "ffn_up");
    emit({.op = Op::SiluMul, .out = up, .in = {up, gate}});
    const View y = matmul(L.ffn_down, up, "y");
    emit({.op = Op::Add, .out = h, .in = {y}});
  }

  // The output head stays unfused: its 248320 rows stream best through the two-launch GEMV
  // (measured, H200, 2026-11-30: rms_norm 2.6 µs + quantise + product 48.9 µs, against
  // 86.5 µs for the fused one-launch kernel, whose persistent CTAs suit the per-layer shapes).
  void output(View h) {
    const View x = buf("x", hp_.n_embd);
    emit({.op = Op::RmsNorm, .out = x, .in = {h}, .vec = &m_.output_norm, .eps = hp_.rms_eps});
    View last = x;
    if (!p_.all_logits && T_ > 1) {
      last = buf("x_last", hp_.n_embd, 1);
      emit({.op = Op::CopyRows, .out = last, .in = {x}, .row0 = T_ - 1});
    }
    const View logits = matmul(m_.output, last, "logits");
    p_.logits = logits.buf;
  }

  // The projections of a layer's normalised input: RmsNorm(h) then one MatMul per matrix, or
  // (norm-gemv-fused) one MatMulFused step with the norm as its prologue. conv (fused only):
  // matrix 0 feeds layer il's conv, run in the step's epilogue (ConvSilu) with this weight;
  // matrix silu_mat's output is stored through SiLU (fused only: Step::silu_mat).
  std::array<View, 4> project(View h, const std::vector<float>& norm,
                              std::initializer_list<const Matrix*> mats,
                              std::initializer_list<const char*> names,
                              const std::vector<float>* conv = nullptr, int64_t il = -1,
                              int silu_mat = -1) {
    std::array<View, 4> outs{};
    if (fused_gemv_) {
      Step s{.op = Op::MatMulFused,
             .in = {h},
             .vec = &norm,
             .eps = hp_.rms_eps,
             .prologue = Prologue::RmsNorm,
             .silu_mat = silu_mat};
      if (conv) {
        s.epilogue = Epilogue::ConvSilu;
        s.vec2 = conv;
        s.layer = il;
      }
      size_t i = 0;
      for (const char* name : names) {
        s.mats[i] = mats.begin()[i];
        s.mouts[i] = outs[i] = buf(name, s.mats[i]->n_out);
        ++i;
      }
      emit(s);
      return outs;
    }
    const View x = buf("x", hp_.n_embd);
    emit({.op = Op::RmsNorm, .out = x, .in = {h}, .vec = &norm, .eps = hp_.rms_eps});
    size_t i = 0;
    for (const char* name : names) {
      outs[i] = matmul(*mats.begin()[i], x, name);
      ++i;
    }
    return outs;
  }

  // The gate applied to a mixer's output before its output matrix.
  struct Gate {
    Prologue prologue;
    View gate;
    const std::vector<float>* norm = nullptr;
    int64_t head_dim = 0;
  };

  // h += W·gated(o): the gate's steps, a MatMul and the residual Add, or (norm-gemv-fused)
  // one MatMulFused step with the gate as its prologue and the add as its epilogue.
  void output_projection(const Matrix& w, View o, View h, const Gate& g) {
    if (fused_gemv_) {
      emit({.op = Op::MatMulFused,
            .in = {o, g.gate},
            .vec = g.norm,
            .head_dim = g.head_dim,
            .eps = hp_.rms_eps,
            .prologue = g.prologue,
            .epilogue = Epilogue::AddInto,
            .mats = {&w},
            .mouts = {h}});
      return;
    }
    if (g.prologue == Prologue::HeadRmsNormSiluGate) {
      emit({.op = Op::RmsNorm,
            .out = o,
            .in = {o},
            .vec = g.norm,
            .head_dim = g.head_dim,
            .eps = hp_.rms_eps});
      emit({.op = Op::SiluMul, .out = o, .in = {o, g.gate}});
    } else {
      emit({.op = Op::SigmoidMul, .out = o, .in = {o, g.gate}});
    }
    const View y = matmul(w, o, "y");
    emit({.op = Op::Add, .out = h, .in = {y}});
  }

  View matmul(const Matrix& w, View x, const char* name) {
    const int64_t rows = p_.buffers[static_cast<size_t>(x.buf)].rows;
    const View out = buf(name, w.n_out, rows);
    emit({.op = Op::MatMul, .out = out, .in = {x}, .w = &w});
    return out;
  }

  // Buffers are reused by name across layers; a name always has one shape.
  View buf(const std::string& name, int64_t cols, int64_t rows = -1) {
    if (rows < 0) rows = T_;
    for (size_t i = 0; i < p_.buffers.size(); ++i) {
      const BufferSpec& b = p_.buffers[i];
      if (b.name != name) continue;
      if (b.rows != rows || b.cols != cols) {
        fail("internal: buffer '{}' reused as [{}x{}], first [{}x{}]", name, rows, cols, b.rows,
             b.cols);
      }
      return {static_cast<int32_t>(i), 0, cols};
    }
    p_.buffers.push_back({name, rows, cols});
    return {static_cast<int32_t>(p_.buffers.size() - 1), 0, cols};
  }

  static View sub(View v, int64_t col, int64_t width) { return {v.buf, v.col + col, width}; }

  void emit(Step s) { p_.steps.push_back(s); }

  const Model& m_;
  const HParams& hp_;
  int64_t T_;
  BuildOptions o_;
  bool fused_gemv_ = false;
  Program p_;
};

}  // namespace

std::string Program::describe() const {
  std::string s;
  for (const Step& st : steps) {
    s += fmt::format("{}", op_name(st.op));
    if (st.layer >= 0) s += fmt::format(" L{}", st.layer);
    if (st.w) s += fmt::format(" {}", st.w->name);
    for (int i = 0; i < st.n_mats(); ++i)
      s += fmt::format(" {}", st.mats[static_cast<size_t>(i)]->name);
    s += step_flags(st) + "\n";
  }
  return s;
}

Program build_forward(const Model& model, int64_t n_tokens, bool all_logits,
                      const BuildOptions& options) {
  if (n_tokens <= 0) fail("build_forward: n_tokens must be positive, got {}", n_tokens);
  if (options.null_dispatches < 0) {
    fail("build_forward: null_dispatches must be >= 0, got {}", options.null_dispatches);
  }
  options.rungs.state_type();  // refuses contradictory rungs
  return Builder(model, n_tokens, all_logits, options).build();
}

}  // namespace gdn::model
