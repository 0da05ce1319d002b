// How a fused decode GEMV (rung norm-gemv-fused) forms its input and finishes its output: the
// program's MatMulFused step names them, executors implement them (cpu_executor.cpp composes
// the reference ops; cuda/matrix.h's matmul_fused runs them in one launch).
//
// C++17-clean: included from CUDA headers.
#pragma once

#include <cstdint>

namespace gdn::model {

enum class Prologue : uint8_t {
  None,                 // x
  RmsNorm,              // rms_norm(x, norm, chunk n_in, eps)
  HeadRmsNormSiluGate,  // rms_norm(x, norm, chunk head_dim, eps), then x·silu(gate) (SiluMul)
  SigmoidGate,          // x·sigmoid(gate) (binary SigmoidMul)
  // The same two with the gate's activation already applied by the step that wrote the gate
  // (Step::silu_mat, Step::gate_sigmoid): x·gate (binary Mul) on the stored silu(z) or
  // sigmoid(g) is the value SiluMul / SigmoidMul computes, bit for bit, while the activation
  // runs once per element instead of in every CTA of the consuming GEMV.
  HeadRmsNormMulGate,  // rms_norm(x, norm, chunk head_dim, eps), then x·gate
  MulGate,             // x·gate
};

// The prologue reads a gate (in[1]); it normalises x; its norm's chunk is a head.
inline constexpr bool prologue_gated(Prologue p) {
  return p == Prologue::HeadRmsNormSiluGate || p == Prologue::SigmoidGate ||
         p == Prologue::HeadRmsNormMulGate || p == Prologue::MulGate;
}
inline constexpr bool prologue_head_normed(Prologue p) {
  return p == Prologue::HeadRmsNormSiluGate || p == Prologue::HeadRmsNormMulGate;
}
inline constexpr bool prologue_normed(Prologue p) {
  return p == Prologue::RmsNorm || prologue_head_normed(p);
}

enum class Epilogue : uint8_t {
  Store,        // y_i = W_i·p(x) for every matrix
  AddInto,      // one matrix: y_0 = y_0 + W_0·p(x) (binary Add: the residual)
  SiluMulPair,  // two matrices (gate, up): y_0 = (W_1·p(x))·silu(W_0·p(x)) (binary SiluMul)
  ConvSilu,     // y_0 = silu(conv(W_0·p(x))): matrix 0's rows are the channels of the GDN
                // layer's causal depthwise conv, run on this one token against the slot's
                // conv state, which it advances in place (ConvStep with SiLU); the other
                // matrices Store
};

// Whether the epilogue writes one output per matrix (Store, ConvSilu) rather than one vector
// combining them (AddInto, SiluMulPair).
inline bool epilogue_per_matrix(Epilogue e) {
  return e == Epilogue::Store || e == Epilogue::ConvSilu;
}

// The fused conv epilogue holds a channel's taps in registers: up to this kernel size (the
// qwen35 models use 4). A larger conv stays a ConvStep of its own.
inline constexpr int kMaxFusedConvKernel = 4;
// The attention layer's fused preparation (Step::fuse_prep) normalises a head with one warp: up to
// this head size (the qwen35 models use 256). A larger head keeps the six unfused steps.
inline constexpr int64_t kMaxAttnPrepHeadDim = 256;

// Names for messages, checks and program dumps.
inline const char* prologue_name(Prologue p) {
  switch (p) {
    case Prologue::None:
      return "none";
    case Prologue::RmsNorm:
      return "rms_norm";
    case Prologue::HeadRmsNormSiluGate:
      return "head_rms_norm_silu_gate";
    case Prologue::SigmoidGate:
      return "sigmoid_gate";
    case Prologue::HeadRmsNormMulGate:
      return "head_rms_norm_mul_gate";
    case Prologue::MulGate:
      return "mul_gate";
  }
  return "?";
}
inline const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::Store:
      return "store";
    case Epilogue::AddInto:
      return "add_into";
    case Epilogue::SiluMulPair:
      return "silu_mul_pair";
    case Epilogue::ConvSilu:
      return "conv_silu";
  }
  return "?";
}

}  // namespace gdn::model
