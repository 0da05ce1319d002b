// Weight matrices on the GPU and the matrix products of every weight format: a GEMV for decode
// (one token) and a batched kernel for prefill (many tokens per launch).
//
// A stored matrix {n_in, n_out} (model::Matrix: n_out rows of n_in elements in the GGUF block
// layout) is repacked once at upload into the layout its kernel wants, keeping the format's bit
// width: codes in 16-byte tiles that a warp reads as contiguous 512-byte segments, block scales
// (fp16, as stored) in an array apart from the codes. Each matmul_<family>.cu describes its
// layout and arithmetic; matmul.cu dispatches.
//
// C++17-clean: included from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/device.h"
#include "model/fusion.h"
#include "model/matrix.h"
#include "quant/types.h"

namespace gdn::cuda {

// A weight matrix in its kernel's layout. Both buffers are what a GEMV reads, padding included.
struct GpuMatrix {
  std::string name;
  quant::Type type = quant::Type::F32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  // Layout parameters (meaning per family: row tiles and 512-weight column quads for Q1_0,
  // 32-row groups and 16-byte column chunks for the others).
  int64_t n_row_tiles = 0;
  int64_t n_col_tiles = 0;
  DeviceBuffer codes;   // bits / bytes / plain values, 16-byte aligned tiles
  DeviceBuffer scales;  // fp16 block scales apart from the codes; empty for F32/F16/BF16
  // Q1_0 only: the chunked layout, multiplied with f32 activations (see upload_matrix).
  bool f32_activations = false;

  size_t device_bytes() const { return codes.bytes() + scales.bytes(); }
};

// Repacks and copies (synchronously with respect to the host data: it is staged before return).
// Throws gdn::Error naming the matrix, type and shape for unsupported types, n_in not a
// multiple of the block size, or sizes the kernels cannot index.
// q1_f32_activations: a Q1_0 matrix goes to the chunked layout and its products use f32
// activations (one FMA per weight, about half the bandwidth of the int8 bit-plane GEMV). Not
// for speed: the int8 activation rounding makes a whole model's output discontinuous, so only
// this arithmetic can be compared with the CPU's f32 reference at rounding level over many
// tokens (gdn eval --compare cpu --q1-activations f32).
GpuMatrix upload_matrix(const model::Matrix& m, cudaStream_t s, bool q1_f32_activations = false);

// Scratch for quantised activations, grown on demand and owned by the caller (the executor).
// One workspace serves one stream: matmuls on one stream reuse it in order. Growing allocates,
// which a stream under graph capture cannot do: reserve() the largest shape before capturing.
class MatmulWorkspace {
 public:
  // Enough for any matmul with n_in <= max_n_in and n_tokens <= max_tokens.
  void reserve(int64_t max_n_in, int64_t max_tokens);
  // Scratch of at least `bytes` (16-byte aligned); fails during capture if it must grow.
  void* get(size_t bytes, cudaStream_t s);

 private:
  DeviceBuffer buf_;
};

// y[t][r] = sum_j W[r][j] * x[t][j] for t < n_tokens, r < n_out, j < n_in. x rows are ldx
// floats apart, y rows ldy floats apart (views into wider buffers). n_tokens == 1 runs the
// GEMV, n_tokens > 1 the batched kernel (weights read once per group of tokens, not once per
// token). Deterministic: the same inputs give bit-identical outputs on every run.
void matmul(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
            int64_t n_tokens, MatmulWorkspace& ws, cudaStream_t s);

// Kernel launches matmul() makes for n_tokens (the executor counts dispatches).
int matmul_launches(const GpuMatrix& w, int64_t n_tokens);

// ---------------------------------------------------------------------------------------------
// Fused decode GEMVs (rung norm-gemv-fused): one launch computes W_i·p(x) for up to
// kMaxFusedMatrices matrices that share their input, where the prologue p is the norm or gate
// that produced x, and the epilogue folds in the residual add or SwiGLU. Each result is
// bit-identical to the unfused sequence it replaces: the prologue's kernels (rms_norm, binary)
// into a buffer, matmul() of every matrix, the epilogue's binary kernel. The fused kernels
// reach that by sharing those kernels' device code and reduction orders, and every matmul's
// per-row summation order depends on n_in and the format only (never on n_out or the launch).

// Prologue::None | RmsNorm | HeadRmsNormSiluGate | SigmoidGate | HeadRmsNormMulGate | MulGate
// and Epilogue::Store | AddInto | SiluMulPair | ConvSilu: model/fusion.h says what each computes.
// ConvSilu replaces conv_step(W_0·p(x), y[0], conv_w, conv_kernel, conv_state, silu) and equals it
// bit for bit (the same device arithmetic, conv.cuh).
using Prologue = model::Prologue;
using Epilogue = model::Epilogue;
constexpr int kMaxFusedMatrices = 4;

struct FusedGemv {
  Prologue prologue = Prologue::None;
  Epilogue epilogue = Epilogue::Store;
  const float* x = nullptr;     // one token, n_in floats
  const float* gate = nullptr;  // n_in floats (model::prologue_gated)
  const float* norm = nullptr;  // n_in (RmsNorm) or head_dim (prologue_head_normed) floats
  int64_t head_dim = 0;
  float eps = 0.0f;
  int n = 0;  // matrices
  const GpuMatrix* w[kMaxFusedMatrices] = {};
  float* y[kMaxFusedMatrices] = {};  // Store, ConvSilu: one per matrix; AddInto, SiluMulPair: y[0]
  // ConvSilu: matrix 0's conv, w[0]->n_out channels: weights [channels][conv_kernel], the
  // state [conv_kernel - 1][channels] (oldest first), advanced in place.
  const float* conv_w = nullptr;
  float* conv_state = nullptr;
  int conv_kernel = 0;
  // Store, ConvSilu: matrix silu_mat's rows are stored as silu(y) (not the conv's, matrix 0 of
  // ConvSilu): the pre-activated gate of a later HeadRmsNormMulGate; -1: none.
  int silu_mat = -1;
  // SMs left to a launch running concurrently on another stream (the executor's side
  // stream): a persistent grid that took every SM would have CTAs queued behind it. Changes
  // only which CTA computes a row, never the arithmetic.
  int spare_sms = 0;
  // Codes out (the executor links gate+up to ffn_down: CudaExecutor::link_codes): a SiluMulPair
  // one-launch Q1_0 GEMV whose CTAs each own whole 128-row blocks of its output
  // (q1_codes_out_blocks of them, from the first) also writes those blocks' activation codes in the
  // two-launch workspace layout (codes_act: [blocks][32] words, codes_meta: [blocks] {d, sum}),
  // quantised inside the CTA from its own rows. Codes in: a prologue-None one-launch Q1_0 GEMV of
  // that output copies the codes of x's first codes_in_blocks blocks and quantises only the rest.
  // Codes of all of x in (n_in / 128 blocks: the GDN recurrence's or attention's CodesOut) may
  // come with any prologue: they are p(x)'s codes, and nothing is staged.
  uint32_t* codes_act = nullptr;
  void* codes_meta = nullptr;
  bool codes_out = false;
  int codes_in_blocks = 0;
  // Rows folded in (CudaExecutor::fused_matmul: the GDN qkv step's BF16 beta and alpha, which
  // otherwise run as a second family on the side stream): a one-launch Q1_0 GEMV whose prologue
  // quantises x straight from memory (q1_fold_refusal says when) also computes every row of
  // fold_n BF16 matrices of the same p(x), CTA r row r of their concatenation, and stores them
  // (Store) into fold_y. Each row is the chunked fused GEMV's arithmetic (its chunk parts,
  // ranges and range order on the same p(x)): bit-identical to launching those matrices as
  // their own family.
  int fold_n = 0;
  const GpuMatrix* fold_w[2] = {};
  float* fold_y[2] = {};
};

// One matrix, no prologue, Store: matmul()'s one-token product as a FusedGemv.
inline FusedGemv plain_gemv(const GpuMatrix& w, const float* x, float* y) {
  FusedGemv f;
  f.x = x;
  f.n = 1;
  f.w[0] = &w;
  f.y[0] = y;
  return f;
}

// Matrices of one family (and equal n_in) can share a matmul_fused launch. The fused kernels
// are templated on the weight format, so a family is one weight type (a model mixing Q8_0 and
// BF16 projections of one input runs one launch per type).
int fused_family(quant::Type t);
// One launch; returns its CTAs. Throws gdn::Error (naming the matrices, types and shapes) for
// mixed families or n_in, a matrix count the epilogue does not take, or missing operands.
unsigned matmul_fused(const FusedGemv& f, cudaStream_t s);
// Why f cannot take family `side`'s matrices as folded rows (FusedGemv::fold_*): empty when it
// can (side: BF16, Store, f's input and prologue, at most 2 matrices and one row per CTA of f's
// launch; f: a one-launch Q1_0 GEMV quantising x in its direct prologue).
std::string q1_fold_refusal(const FusedGemv& f, const FusedGemv& side);
// f with side's matrices as its folded rows.
FusedGemv with_fold(FusedGemv f, const FusedGemv& side);
// How many leading 128-row blocks of f's output a launch of f with codes_out
// writes the codes of (0: f cannot: not a one-launch Q1_0 SiluMulPair GEMV, or too few rows).
int q1_codes_out_blocks(const FusedGemv& f);

// What the checks compare a format against and how closely (max|gpu - ref| / max|ref|).
struct MatmulReference {
  bool q8_128_activations;  // true: quant::dot_row_q1_0_q8_128 (activations quantised per 128)
                            // false: quant::dot_row with f32 activations
  double tolerance;         // against that reference
};
MatmulReference matmul_reference(quant::Type t);

}  // namespace gdn::cuda
