// The CPU reference kernels: plain loops, f32 storage, double accumulation of every sum.
// Each function works on one strided 2-D f32 view (rows × cols, row stride `ld`) so the
// executor can hand it column ranges of a buffer. CUDA kernels are tested against these.
#pragma once

#include <cstdint>

#include "common/parallel.h"
#include "model/weights.h"

namespace gdn::cpu {

struct Rows {
  float* data;
  int64_t rows, cols, ld;
  float* row(int64_t r) const { return data + r * ld; }
};

// y = x·rsqrt(mean(x²) + eps)·w per chunk of `chunk` columns (w has `chunk` entries).
void rms_norm(Rows x, Rows y, const float* w, int64_t chunk, float eps);
// y = x·rsqrt(Σx² + eps) per chunk of `chunk` columns.
void l2_norm(Rows x, Rows y, int64_t chunk, float eps);
// y[t] = W·x[t], rows of W split over the pool. With q8_activations, Q1_0 rows meet x
// quantised to int8 per 128 elements (quant::dot_row_q1_0_q8_128), as the CUDA GEMV does.
void mat_mul(const model::Matrix& w, Rows x, Rows y, ThreadPool& pool, bool q8_activations = false);
// Row t of the embedding table, dequantised.
void embed(const model::Matrix& table, const int32_t* ids, Rows y);

enum class Unary { Sigmoid, Softplus, Silu };
void unary(Unary f, Rows x, Rows y);
float sigmoid(float x);
float softplus(float x);  // log(1 + e^x), linear above 20 like torch
float silu(float x);
// y = y + x | x·silu(g) | x·sigmoid(g) | x·g
enum class Binary { Add, SiluMul, SigmoidMul, Mul };
void binary(Binary f, Rows x, Rows g, Rows y);
enum class Broadcast { Add, Mul };  // y = x (+|·) v[col]
void broadcast(Broadcast f, Rows x, const float* v, Rows y);

// x holds per head [a | b] of `head_dim` each: a parts to ya, b parts to yb.
void split_heads(Rows x, Rows ya, Rows yb, int64_t head_dim);

// Causal depthwise conv over the T rows of x: tap K-1 multiplies the current row; `state`
// holds the previous K-1 inputs [K-1][C] (oldest first) and is advanced in place.
// w is [C][K].
void conv_step(Rows x, Rows y, const float* w, int64_t kernel, float* state);

// Gated delta rule over T tokens, value head h using key head h % Hk (tiled order).
// q, k: [T][Hk·dk] (already L2-normalised); v, out: [T][Hv·dv]; g, beta: [T][Hv];
// state: [Hv][dk][dv], updated in place. Per head: S ← e^g·S; δ = β(v − Sᵀk); S ← S + kδᵀ;
// o = Sᵀq / √dk.
void gdn_recurrence(Rows q, Rows k, Rows v, Rows g, Rows beta, Rows out, float* state,
                    int64_t n_k_heads, int64_t n_v_heads, int64_t d);

// NeoX RoPE on the first n_rot dims of every head: pairs (i, i + n_rot/2), position pos0 + t.
void rope(Rows x, int64_t head_dim, int64_t n_rot, float theta, int64_t pos0);

// Causal GQA attention for T query rows at positions pos0.. against a cache holding
// positions [0, pos0 + T): q [T][H·D], k/v cache [n_ctx][Hkv·D], out [T][H·D].
// Query head h reads kv head h / (H / Hkv).
void attention(Rows q, const float* k_cache, const float* v_cache, Rows out, int64_t n_head,
               int64_t n_head_kv, int64_t head_dim, int64_t pos0);

}  // namespace gdn::cpu
