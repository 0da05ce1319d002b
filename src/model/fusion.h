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
};

enum class Epilogue : uint8_t {
  Store,        // y_i = W_i·p(x) for every matrix
  AddInto,      // one matrix: y_0 = y_0 + W_0·p(x) (binary Add: the residual)
  SiluMulPair,  // two matrices (gate, up): y_0 = (W_1·p(x))·silu(W_0·p(x)) (binary SiluMul)
};

}  // namespace gdn::model
