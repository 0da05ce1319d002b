// The non-matmul CUDA kernels: the GPU twins of cpu/ops.h, same names and argument meanings,
// with device pointers and a stream. Every launcher checks its shapes (gdn::Error naming the
// op and the shape) and the launch (CUDA_CHECK_LAUNCH); none synchronises, allocates or
// copies through the host, so every one can be captured into a CUDA graph.
//
// Conventions shared by all of them:
//   * DevRows is a strided f32 view like cpu::Rows: rows × cols, row stride ld (floats),
//     usually a column range of a wider buffer, so data need not be 16-byte aligned.
//   * Element-wise ops, norms and rope may run in place (output = input, same data and ld:
//     the decode program's silu(conv) → conv); conv_step and gdn_recurrence may not, and
//     partially overlapping views are never supported.
//   * Cache and state layouts are the CPU executor's: K/V cache [n_ctx][Hkv·D] per layer,
//     GDN state [Hv][dk][dv] (S[i][j]: key dim i, value dim j), conv history [K-1][C] oldest
//     first.
//
// C++17-clean: included from .cu files (nvcc compiles them as C++17) and from C++20 .cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "model/rungs.h"
#include "quant/types.h"

// The element-wise op enums are cpu/ops.h's. That header pulls C++20 headers (<span>) that
// nvcc's C++17 front end cannot parse, so .cu files see only these opaque declarations and
// switch on the enumerator values restated in cuda::op_value below; checks_ops.cpp (C++20)
// static_asserts that the two agree. C++20 callers get the full definitions.
namespace gdn::cpu {
enum class Unary;      // Sigmoid, Softplus, Silu
enum class Binary;     // Add, SiluMul, SigmoidMul, Mul
enum class Broadcast;  // Add, Mul
}  // namespace gdn::cpu
#if __cplusplus >= 202002L && !defined(__CUDACC__)
#include "cpu/ops.h"
#endif

namespace gdn::cuda {

namespace op_value {  // cpu/ops.h's enumerator values (checked in checks_ops.cpp)
inline constexpr int kSigmoid = 0, kSoftplus = 1, kSilu = 2;             // cpu::Unary
inline constexpr int kAdd = 0, kSiluMul = 1, kSigmoidMul = 2, kMul = 3;  // cpu::Binary
inline constexpr int kBroadcastAdd = 0, kBroadcastMul = 1;               // cpu::Broadcast
}  // namespace op_value

// Device view: rows × cols, row stride ld (floats).
struct DevRows {
  float* data;
  int64_t rows, cols, ld;
};

// The token embedding table on the GPU in its GGUF storage format, rows uploaded byte for
// byte (no repacking): a step reads only n_tokens rows, so the format hardly matters for
// speed, and keeping the file's bytes costs the least memory (Q1_0 Bonsai: 178 MB, against
// 5 GB as f32) and lets the kernel reproduce quant::dequantize_row bit for bit.
struct DevTable {
  const void* data;  // n_out rows of row_bytes each
  quant::Type type;
  int64_t n_in;   // elements per row (E)
  int64_t n_out;  // rows (vocabulary)
  size_t row_bytes;
};

// y = x·rsqrt(mean(x²) + eps)·w per chunk of `chunk` columns (w has `chunk` entries).
void rms_norm(DevRows x, DevRows y, const float* w, int64_t chunk, float eps, cudaStream_t s);
// y = x·rsqrt(Σx² + eps) per chunk of `chunk` columns.
void l2_norm(DevRows x, DevRows y, int64_t chunk, float eps, cudaStream_t s);

// y[t] = table row ids[t], dequantised exactly as quant::dequantize_row. ids is a device
// array of y.rows ids. A kernel cannot throw: a row whose id is outside [0, n_out) is
// written as NaN, so callers validate ids on the host (the CPU executor's message).
void embed(DevTable table, const int32_t* ids, DevRows y, cudaStream_t s);

void unary(cpu::Unary f, DevRows x, DevRows y, cudaStream_t s);
// y = y + x | x·silu(g) | x·sigmoid(g)   (g unused for Add)
void binary(cpu::Binary f, DevRows x, DevRows g, DevRows y, cudaStream_t s);
// y = x (+|·) v[col]
void broadcast(cpu::Broadcast f, DevRows x, const float* v, DevRows y, cudaStream_t s);

// x holds per head [a | b] of head_dim each: a parts to ya, b parts to yb.
void split_heads(DevRows x, DevRows ya, DevRows yb, int64_t head_dim, cudaStream_t s);
// y = x rows [row0, row0 + y.rows).
void copy_rows(DevRows x, int64_t row0, DevRows y, cudaStream_t s);
// A recurrent state [Hv][d][d] in its storage type: f32, or f16/bf16 (round-to-nearest-even
// on every store; every kernel computes in f32 and widens exactly on load).
struct DevState {
  void* data;
  model::StateType type;
  // No kernel that may still be running writes it: gdn_recurrence may then read it before
  // pdl_wait, beside the previous kernel's tail. True of a slot's state during a forward (its
  // first step, Embed, synchronises the stream, and only the layer's own recurrence writes the
  // slot); false of the baseline's work buffer, which the gather kernel right before fills.
  bool settled = false;
};
// n state values src → dst as one kernel launch, converting between storage types (the
// baseline's state gather/scatter is a dispatch, as llama.cpp's copy kernel is; a
// cudaMemcpyAsync would hide it from the count). Widening is exact; narrowing rounds exactly
// as gdn_recurrence's store does, so gather → f32 recurrence → scatter equals the fused
// in-place recurrence bit for bit in every storage type.
void copy_state(DevState src, DevState dst, int64_t n, cudaStream_t s);
// y = rows of a followed by rows of b (same cols), one launch: the baseline conv's
// [state; x] window, as llama.cpp concatenates it.
void concat_rows(DevRows a, DevRows b, DevRows y, cudaStream_t s);
// An empty kernel (gdn bench --null-dispatches prices a dispatch with it).
void empty_kernel(cudaStream_t s);
// The position of a launch's first row. Plain launches pass it by value; launches captured
// in a CUDA graph read it from device memory at run time (the graph is replayed for every
// token). `bound` (>= 0) is an upper bound of the position that sizes launches whose shape
// would otherwise depend on it (attention's key split), so a graph and a plain launch of the
// same step run the same arithmetic.
struct Pos {
  Pos(int64_t h) : host(h) {}  // NOLINT: a plain position converts implicitly
  Pos(int64_t h, int64_t b, const int32_t* d) : host(h), bound(b), device(d) {}
  int64_t host;
  int64_t bound = -1;
  const int32_t* device = nullptr;
  int64_t plan() const { return bound >= 0 ? bound : host; }
};

// k and v rows t → k_cache/v_cache row pos0 + t (cache rows are kv_dim floats; k.cols and
// v.cols must equal kv_dim). One launch for both. The caller guarantees pos0 + rows <= n_ctx.
void kv_store(DevRows k, DevRows v, float* k_cache, float* v_cache, int64_t kv_dim, Pos pos0,
              cudaStream_t s);

// Causal depthwise conv over the T rows of x (tap K-1 multiplies the current row); `state`
// [K-1][C] holds the previous K-1 inputs, oldest first, and is advanced in place. w is [C][K],
// K <= 8. x and y must not overlap. silu: y = silu(conv) with the Silu kernel's device
// function (rung conv-inplace fuses it; the result equals conv then unary Silu bit for bit).
// state == nullptr (the baseline window): x holds the K-1 previous inputs as its first rows,
// then the T rows of the step (x.rows = T + K - 1, y.rows = T); no state is written.
void conv_step(DevRows x, DevRows y, const float* w, int64_t kernel, float* state, bool silu,
               cudaStream_t s);

// Codes out: a kernel that makes the input x of the Q1_0 GEMV right after it (one token) also
// writes x's activation codes through that GEMV's prologue, so the GEMV copies them instead
// of staging and quantising x in each of its CTAs (FusedGemv::codes_in_blocks = all of x).
// act [blocks][32] words and meta [blocks] {d, sum} as FusedGemv::codes_act / codes_meta;
// gate, and for a head norm its weight and eps: the GEMV prologue's operands. The kernel uses
// that prologue's and the quantiser's device code on the same floats: bit-identical.
struct CodesOut {
  uint32_t* act = nullptr;  // null: no codes out
  void* meta = nullptr;
  const float* gate = nullptr;
  const float* norm = nullptr;
  float eps = 0.0f;
};

// What the GDN kernel computes from raw operands instead of reading finished ones. Each
// fusion uses the unfused kernels' device functions in their order, so the result is
// bit-identical to running those kernels first.
struct GdnFusion {
  // Rung gating-fused (both set): g and beta hold the raw projections a and b;
  // beta = sigmoid(b), g = softplus(a + dt_bias[h])·ssm_a[h] (the Sigmoid, AddVec, Softplus,
  // MulVec kernels' arithmetic).
  const float* dt_bias = nullptr;
  const float* ssm_a = nullptr;
  // Rung l2norm-fused: q and k are raw; every key head of d floats is L2-normalised inside
  // with the l2_norm kernel's reduction order and eps (chunk d).
  bool l2norm = false;
  float l2_eps = 0.0f;
  // Codes out (gdn_codes_out_ok: one token, d = 128, so a value head is one block of
  // ssm_out's input): p(o) = rms_norm(o, norm [d], chunk d, eps)·gate [Hv·d], ssm_out's
  // HeadRmsNormMulGate prologue, quantised into Hv blocks of codes. out is written as well.
  CodesOut codes;
};

// Gated delta rule over the T rows, value head h using key head h % Hk. q, k: [T][Hk·d]
// (L2-normalised unless fused), v, out: [T][Hv·d], g, beta: [T][Hv] (finished unless fused).
// The state [Hv][d][d] is read from state_in and the updated state written to state_out:
// the same buffer (in place), or different buffers of any storage types (rungs
// state-inplace / state-write-fused with a work buffer on the other side). d <= 256. No
// output may alias an input.
void gdn_recurrence(DevRows q, DevRows k, DevRows v, DevRows g, DevRows beta, DevRows out,
                    DevState state_in, DevState state_out, int64_t n_k_heads, int64_t n_v_heads,
                    int64_t d, const GdnFusion& fusion, cudaStream_t s);
// Whether gdn_recurrence can write codes out (GdnFusion::codes) for these heads: d = 128
// and a head's value columns on at most 8 CTAs (one cluster), as its launch splits them.
bool gdn_codes_out_ok(int64_t n_v_heads, int64_t d);

// NeoX RoPE in place on the first n_rot dims of every head of x, row t at position pos0 + t.
void rope(DevRows x, int64_t head_dim, int64_t n_rot, float theta, Pos pos0, cudaStream_t s);

// attention()'s fused preparation (rung norm-gemv-fused, one token): q holds the raw qg
// [1][H·2D] (per head q | gate), and the kernel first does what split_heads(qg → q, gate);
// rms_norm(q, q_norm, head_dim); rope(q); rms_norm(k, k_norm, head_dim); rope(k);
// kv_store(k, v) would, bit for bit (q is not stored, k and v are only read).
struct AttnPrep {
  DevRows k, v;                   // [1][Hkv·D]
  DevRows gate;                   // [1][H·D], written
  const float* q_norm = nullptr;  // [head_dim]
  const float* k_norm = nullptr;  // [head_dim]
  int64_t n_rot = 0;
  float theta = 0.0f, eps = 0.0f;
  bool gate_sigmoid = false;  // gate = sigmoid(the gate half), as binary SigmoidMul applies it
  // The rope angles of the position, (sin, cos) of pair i at angles[2i], angles[2i + 1] (room
  // for n_rot / 2 pairs): with angles_given loaded from there (written by an earlier launch at
  // the same position: the same device function made them, so the bits are the same), else
  // computed, and stored there when angles is set.
  double* angles = nullptr;
  bool angles_given = false;
};

// Causal GQA attention of T query rows at positions pos0.. against caches holding positions
// [0, pos0 + T): q, out [T][H·D], caches [n_ctx][Hkv·D]; query head h reads kv head
// h / (H / Hkv). D <= 256. The caller guarantees pos0 + T <= n_ctx. With prep, q is the raw
// qg [1][H·2D] (AttnPrep).
// codes (attn_codes_out_ok: one token, D a multiple of 128): also p(out) = out·gate [H·D],
// attn_output's MulGate prologue, quantised into H·D/128 blocks of codes (CodesOut; with prep
// the gate is the prep's).
// prep: the new position's key and value are computed here and stored (AttnPrep).
void attention(DevRows q, float* k_cache, float* v_cache, DevRows out, int64_t n_head,
               int64_t n_head_kv, int64_t head_dim, Pos pos0, cudaStream_t s,
               const CodesOut& codes = {}, const AttnPrep* prep = nullptr);
bool attn_codes_out_ok(int64_t head_dim);

}  // namespace gdn::cuda
