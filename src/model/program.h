// The decode program: the qwen35 forward pass for one batch shape, built once as a flat list
// of steps over named f32 buffers. Executors (CPU reference, CUDA launches, CUDA graph,
// megakernel) run programs; they never see the model's structure.
//
// This is the baseline granularity (one step per elementary op, as llama.cpp dispatches it);
// fusions are later rewrites of the step list.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/weights.h"

namespace gdn::model {

enum class Op : uint8_t {
  Embed,          // out[t] = token_embd row ids[t]
  RmsNorm,        // out = x·rsqrt(mean(x²)+eps)·vec, per chunk of `head_dim` (whole row if 0)
  MatMul,         // out[t] = W·x[t]
  Add,            // out += x
  AddVec,         // out = x + vec (broadcast over rows)
  MulVec,         // out = x · vec (broadcast over rows)
  Sigmoid,        // out = sigmoid(x)
  Softplus,       // out = softplus(x)
  Silu,           // out = silu(x)
  SiluMul,        // out = x · silu(gate)
  SigmoidMul,     // out = x · sigmoid(gate)
  L2NormHeads,    // out = x·rsqrt(Σx² + eps) per chunk of head_dim
  SplitHeads,     // x holds per head [a(head_dim) | b(head_dim)]: out = a parts, out2 = b parts
  ConvStep,       // causal depthwise conv over the tokens, reading/writing the slot's conv state
  StateGather,    // out (work) = recurrent state of the slot's layer
  StateScatter,   // recurrent state of the slot's layer = in[0] (work)
  GdnRecurrence,  // gated delta rule over the tokens; state in out2 (work) or the slot
  Rope,           // NeoX RoPE on the first n_rot dims of each head, positions pos0 + t
  KvStore,        // k (in[0]) and v (in[1]) rows into the slot's KV cache at pos0 + t
  Attention,      // causal GQA softmax attention of q (in[0]) against the slot's KV cache
  CopyRows,       // out = x rows [row0, row0 + out rows)
};
const char* op_name(Op op);

// A column range of a buffer: rows are the buffer's rows, row stride its cols.
struct View {
  int32_t buf = -1;
  int64_t col = 0;
  int64_t width = 0;
  bool valid() const { return buf >= 0; }
};

struct BufferSpec {
  std::string name;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Operands: `in[0]` is the main input (x), `in[1]` the second (gate, v for KvStore); the
// recurrence takes in = {q, k, v, g, beta}, writes `out` and updates the state in `out2`
// (or the slot's state when out2 is not valid).
struct Step {
  Op op = Op::Embed;
  View out{};
  std::array<View, 5> in{};
  View out2{};
  const Matrix* w = nullptr;                // MatMul
  const std::vector<float>* vec = nullptr;  // norm weight, bias, scale
  int64_t layer = -1;                       // cache/state owner
  int64_t head_dim = 0;
  int64_t row0 = 0;  // CopyRows
  float eps = 0.0f;
};

struct Program {
  int64_t n_tokens = 0;
  bool all_logits = true;  // logits for every token, or for the last only
  std::vector<BufferSpec> buffers;
  std::vector<Step> steps;
  int32_t logits = -1;  // buffer holding [rows][n_vocab]
  const Model* model = nullptr;

  std::string describe() const;  // one line per step, for debugging and tests
};

// Builds the trunk forward for n_tokens tokens (prefill when > 1, decode when 1).
Program build_forward(const Model& model, int64_t n_tokens, bool all_logits);

}  // namespace gdn::model
