#include "model/program.h"

#include <fmt/format.h>

#include "common/error.h"

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
  }
  return "?";
}

namespace {

// q and k are L2-normalised with this epsilon inside the sum, as HF's torch path does.
constexpr float kL2NormEps = 1e-6f;

class Builder {
 public:
  Builder(const Model& m, int64_t n_tokens, bool all_logits) : m_(m), hp_(m.hp), T_(n_tokens) {
    p_.n_tokens = n_tokens;
    p_.all_logits = all_logits;
    p_.model = &m;
  }

  Program build() {
    const View h = buf("h", hp_.n_embd);
    emit({.op = Op::Embed, .out = h});
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      const Layer& L = m_.layers[static_cast<size_t>(il)];
      const View x = buf("x", hp_.n_embd);
      emit({.op = Op::RmsNorm, .out = x, .in = {h}, .vec = &L.attn_norm, .eps = hp_.rms_eps});
      const View y = L.recurrent ? gdn(L, il, x) : attention(L, il, x);
      emit({.op = Op::Add, .out = h, .in = {y}});
      ffn(L, h);
    }
    output(h);
    return std::move(p_);
  }

 private:
  View gdn(const Layer& L, int64_t il, View x) {
    const GdnWeights& g = L.gdn;
    const int64_t qk = hp_.ssm_qk_dim(), inner = hp_.ssm_inner(), Hv = hp_.ssm_n_v_heads;
    const int64_t dk = hp_.ssm_d_state;
    const View qkv = matmul(g.qkv, x, "qkv");
    const View z = matmul(g.gate, x, "z");
    const View b = matmul(g.beta, x, "beta");
    const View a = matmul(g.alpha, x, "alpha");

    const View conv = buf("conv", hp_.conv_dim());
    emit({.op = Op::ConvStep, .out = conv, .in = {qkv}, .vec = &g.conv, .layer = il});
    emit({.op = Op::Silu, .out = conv, .in = {conv}});
    const View q = sub(conv, 0, qk), k = sub(conv, qk, qk), v = sub(conv, 2 * qk, inner);
    emit({.op = Op::L2NormHeads, .out = q, .in = {q}, .head_dim = dk, .eps = kL2NormEps});
    emit({.op = Op::L2NormHeads, .out = k, .in = {k}, .head_dim = dk, .eps = kL2NormEps});

    emit({.op = Op::Sigmoid, .out = b, .in = {b}});
    emit({.op = Op::AddVec, .out = a, .in = {a}, .vec = &g.dt_bias});
    emit({.op = Op::Softplus, .out = a, .in = {a}});
    emit({.op = Op::MulVec, .out = a, .in = {a}, .vec = &g.a});

    // Baseline, as llama.cpp runs it: state copied out of the slot, updated, copied back.
    const View state = buf("gdn_state", Hv * dk * dk, 1);
    emit({.op = Op::StateGather, .out = state, .layer = il});
    const View o = buf("gdn_out", inner);
    emit({.op = Op::GdnRecurrence,
          .out = o,
          .in = {q, k, v, a, b},
          .out2 = state,
          .layer = il,
          .head_dim = dk});
    emit({.op = Op::StateScatter, .in = {state}, .layer = il});

    emit({.op = Op::RmsNorm,
          .out = o,
          .in = {o},
          .vec = &g.norm,
          .head_dim = dk,
          .eps = hp_.rms_eps});
    emit({.op = Op::SiluMul, .out = o, .in = {o, z}});
    return matmul(g.out, o, "y");
  }

  View attention(const Layer& L, int64_t il, View x) {
    const AttentionWeights& A = L.attn;
    const int64_t D = hp_.head_dim;
    const View qg = matmul(A.q, x, "q_gate");
    const View q = buf("q", hp_.q_dim()), gate = buf("attn_gate", hp_.q_dim());
    emit({.op = Op::SplitHeads, .out = q, .in = {qg}, .out2 = gate, .head_dim = D});
    const View k = matmul(A.k, x, "k");
    const View v = matmul(A.v, x, "v");
    emit({.op = Op::RmsNorm,
          .out = q,
          .in = {q},
          .vec = &A.q_norm,
          .head_dim = D,
          .eps = hp_.rms_eps});
    emit({.op = Op::RmsNorm,
          .out = k,
          .in = {k},
          .vec = &A.k_norm,
          .head_dim = D,
          .eps = hp_.rms_eps});
    emit({.op = Op::Rope, .out = q, .in = {q}, .head_dim = D});
    emit({.op = Op::Rope, .out = k, .in = {k}, .head_dim = D});
    emit({.op = Op::KvStore, .in = {k, v}, .layer = il});
    const View att = buf("attn_out", hp_.q_dim());
    emit({.op = Op::Attention, .out = att, .in = {q}, .layer = il, .head_dim = D});
    emit({.op = Op::SigmoidMul, .out = att, .in = {att, gate}});
    return matmul(A.o, att, "y");
  }

  void ffn(const Layer& L, View h) {
    const View x = buf("x", hp_.n_embd);
    emit({.op = Op::RmsNorm, .out = x, .in = {h}, .vec = &L.post_norm, .eps = hp_.rms_eps});
    const View gate = matmul(L.ffn_gate, x, "ffn_gate");
    const View up = matmul(L.ffn_up, x, "ffn_up");
    emit({.op = Op::SiluMul, .out = up, .in = {up, gate}});
    const View y = matmul(L.ffn_down, up, "y");
    emit({.op = Op::Add, .out = h, .in = {y}});
  }

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
  Program p_;
};

}  // namespace

std::string Program::describe() const {
  std::string s;
  for (const Step& st : steps) {
    s += fmt::format("{}", op_name(st.op));
    if (st.layer >= 0) s += fmt::format(" L{}", st.layer);
    if (st.w) s += fmt::format(" {}", st.w->name);
    s += "\n";
  }
  return s;
}

Program build_forward(const Model& model, int64_t n_tokens, bool all_logits) {
  if (n_tokens <= 0) fail("build_forward: n_tokens must be positive, got {}", n_tokens);
  return Builder(model, n_tokens, all_logits).build();
}

}  // namespace gdn::model
