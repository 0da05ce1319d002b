// The decode program: the qwen35 forward pass for one batch shape, built once as a flat list
// of steps over named f32 buffers. Executors (CPU reference, CUDA launches, CUDA graph,
// megakernel) run programs; they never see the model's structure.
//
// With no rungs (model/rungs.h) this is the baseline granularity: one step per elementary op,
// as llama.cpp dispatches it. Each rung rewrites the step list (fused steps, step variants);
// build_forward applies them, executors run them or refuse them by name.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/fusion.h"
#include "model/rungs.h"
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
  ConvStep,       // causal depthwise conv over the tokens (variants: see Step)
  ConvConcat,     // out = [the slot's conv state (K-1 rows); x rows]: the baseline conv window
  ConvSave,       // the slot's conv state = x rows [row0, row0 + K-1) (the window's last rows)
  StateGather,    // out (work) = recurrent state of the slot's layer
  StateScatter,   // recurrent state of the slot's layer = in[0] (work)
  GdnRecurrence,  // gated delta rule over the tokens; state in out2 (work) or the slot
  Rope,           // NeoX RoPE on the first n_rot dims of each head, positions pos0 + t
  KvStore,        // k (in[0]) and v (in[1]) rows into the slot's KV cache at pos0 + t
  Attention,      // causal GQA softmax attention of q (in[0]) against the slot's KV cache
                  // (fuse_prep: in[0] is the raw qg, prepared first; see Step)
  CopyRows,       // out = x rows [row0, row0 + out rows)
  MatMulFused,    // one token: mouts[i] = mats[i]·prologue(x), finished by the epilogue
  Null,           // an empty dispatch (gdn bench --null-dispatches prices a dispatch)
};
inline constexpr int kOpCount = static_cast<int>(Op::Null) + 1;
const char* op_name(Op op);
// The op named by op_name; an unknown name throws gdn::Error naming it and every known one.
Op op_from_name(std::string_view name);

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
// recurrence takes in = {q, k, v, g, beta}, writes `out` and reads/writes the state in the
// slot or in the work buffer `out2` (see the flags).
struct Step {
  Op op = Op::Embed;
  View out{};
  std::array<View, 5> in{};
  View out2{};
  const Matrix* w = nullptr;                 // MatMul
  const std::vector<float>* vec = nullptr;   // norm weight, bias, conv weight; dt_bias (gating)
  const std::vector<float>* vec2 = nullptr;  // ssm_a (gating-fused recurrence)
  int64_t layer = -1;                        // cache/state owner
  int64_t head_dim = 0;
  int64_t row0 = 0;  // CopyRows, ConvSave
  float eps = 0.0f;  // norms; the recurrence's fused L2 norm

  // GdnRecurrence variants (rungs state-inplace, state-write-fused, gating-fused, l2norm-fused).
  bool state_in_slot = false;   // read the state from the slot, else from out2
  bool state_out_slot = false;  // write the state to the slot, else to out2
  bool fuse_gating = false;     // g, beta are the raw a, b: beta = sigmoid(b),
                                // g = softplus(a + vec)·vec2
  bool fuse_l2norm = false;     // q, k are raw: L2-normalised per head inside (eps)
  // ConvStep variants: the baseline reads its history from a ConvConcat window (in[0] holds
  // K-1 history rows first) and writes no state; conv-inplace reads and advances the slot's
  // state itself and applies SiLU (fuse_silu).
  bool conv_window = false;
  bool fuse_silu = false;

  // MatMulFused (rung norm-gemv-fused): in[0] = x, in[1] = the gate (prologue_gated), vec =
  // the norm weight, head_dim, eps; ConvSilu: vec2 = the conv weight, layer = the owner of the
  // conv state.
  Prologue prologue = Prologue::None;
  Epilogue epilogue = Epilogue::Store;
  std::array<const Matrix*, 4> mats{};
  std::array<View, 4> mouts{};  // Store, ConvSilu: one per matrix; AddInto, SiluMulPair: [0]
  // Store, ConvSilu: mouts[silu_mat] (not ConvSilu's conv channels) holds silu(W·p(x)), the
  // pre-activated gate of a later HeadRmsNormMulGate; -1: none.
  int silu_mat = -1;
  // Attention with fuse_prep (rung norm-gemv-fused, decode): in = {qg, k, v}, out2 = gate,
  // vec = q_norm, vec2 = k_norm, eps: the steps SplitHeads(qg → q, gate), RmsNorm(q, q_norm),
  // Rope(q), RmsNorm(k, k_norm), Rope(k), KvStore(k, v) run first, in the same step (k is only
  // read). gate_sigmoid: out2 holds sigmoid(gate), the pre-activated gate of a later MulGate.
  bool fuse_prep = false;
  bool gate_sigmoid = false;

  // Needs only the steps before it and touches only its views (no cache or state): an
  // executor may overlap it with the steps after it, up to the first that touches its views
  // (the CUDA executor's side stream). Set on the attention layer's k chain (norm, rope),
  // which runs beside the q chain.
  bool concurrent = false;
  int n_mats() const;
};

// What a step does, without its layer: "mat_mul output q1_0 5120->248320", "mat_mul_fused
// attn_qkv+attn_gate+ssm_beta+ssm_alpha q1_0+bf16 5120->16480 rms_norm/store",
// "gdn_recurrence state-in-slot ...".
// Steps of the same kind in different layers do the same work (gdn bench --timeline sums
// their time).
std::string step_kind(const Step& s);

// The bytes of the weight matrices a step reads (its matrix, or a fused step's matrices), as
// stored: what a decode step must stream at the least.
uint64_t step_weight_bytes(const Step& s);

struct Program;
// What a step of p must move through DRAM at the least: its weights and the recurrent state it
// reads and writes (a slot's state in the program's state type, the f32 work copy of the
// baseline's gather and scatter). Activations, caches and norm vectors are left out (small
// beside these in a decode). Summed over a decode program: its bytes per token.
struct StepTraffic {
  uint64_t read = 0;
  uint64_t write = 0;
};
StepTraffic step_traffic(const Program& p, const Step& s);

// A decode's steps as gdn bench --floor prices them: what each streams, and whether every CTA
// reads all of x (a GEMV) or only its share's sources. Each step whose op is in `fold` is folded
// into the step before it: the structure of a kernel that would do both behind one wait (the
// recurrence inside its qkv GEMV's CTAs, say), priced before anyone builds it. Embeddings and
// null probes are left out (a host copy, an empty kernel).
struct FloorStepSpec {
  StepTraffic traffic;
  bool gemv = false;
  std::string kind;  // step_kind, folded steps' kinds joined by " + "
};
std::vector<FloorStepSpec> floor_spec(const Program& p, const std::vector<Op>& fold = {});

struct Program {
  int64_t n_tokens = 0;
  bool all_logits = true;  // logits for every token, or for the last only
  Rungs rungs;             // the rewrites it was built with
  std::vector<BufferSpec> buffers;
  std::vector<Step> steps;
  int32_t logits = -1;  // buffer holding [rows][n_vocab]
  const Model* model = nullptr;

  std::string describe() const;  // one line per step, for debugging and tests
};

struct BuildOptions {
  Rungs rungs = Rungs::exact();
  int null_dispatches = 0;  // empty steps appended to a decode (one-token) program
};

// Builds the trunk forward for n_tokens tokens (prefill when > 1, decode when 1).
// norm-gemv-fused rewrites decode programs only: a prefill's matmuls are batched kernels that
// read each weight once for many tokens, where a fused norm would save nothing measurable.
Program build_forward(const Model& model, int64_t n_tokens, bool all_logits,
                      const BuildOptions& options = {});

}  // namespace gdn::model
