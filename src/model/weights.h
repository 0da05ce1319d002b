// A loaded qwen35 model: hyper-parameters plus every tensor bound by name, type and shape.
// Matrices stay in their stored format (views into the mmap'ed GGUF); small vectors are
// widened to f32 once at load.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/hparams.h"
#include "model/matrix.h"

namespace gdn::model {

struct GdnWeights {
  Matrix qkv;                  // {E, conv_dim}: rows q (Hk·dk) | k (Hk·dk) | v (Hv·dv)
  Matrix gate;                 // {E, Hv·dv}: z
  Matrix beta;                 // {E, Hv}
  Matrix alpha;                // {E, Hv}
  Matrix out;                  // {Hv·dv, E}
  std::vector<float> conv;     // [conv_dim][kernel]; tap kernel-1 multiplies the current token
  std::vector<float> dt_bias;  // [Hv]
  std::vector<float> a;        // [Hv] = -exp(A_log)
  std::vector<float> norm;     // [dv], shared by all heads (no +1)
};

struct AttentionWeights {
  Matrix q;                   // {E, 2·H·D}: per head D query rows then D gate rows
  Matrix k;                   // {E, Hkv·D}
  Matrix v;                   // {E, Hkv·D}
  Matrix o;                   // {H·D, E}
  std::vector<float> q_norm;  // [D]
  std::vector<float> k_norm;  // [D]
};

struct NextnWeights {
  Matrix eh_proj;                                     // {2E, E}
  std::vector<float> enorm, hnorm, shared_head_norm;  // [E]; shared_head_norm may be empty
  Matrix shared_head_head;                            // optional {E, vocab}
  Matrix embed_tokens;                                // optional {E, vocab}
};

struct Layer {
  bool recurrent = false;
  std::vector<float> attn_norm;  // [E]
  std::vector<float> post_norm;  // [E]
  Matrix ffn_gate, ffn_up;       // {E, F}
  Matrix ffn_down;               // {F, E}
  GdnWeights gdn;                // recurrent layers
  AttentionWeights attn;         // attention layers (and MTP blocks)
  NextnWeights nextn;            // MTP blocks only
};

struct Model {
  HParams hp;
  Matrix token_embd;  // {E, vocab}
  Matrix output;      // {E, vocab}; the same tensor as token_embd when tied
  bool tied_output = false;
  std::vector<float> output_norm;          // [E]
  std::vector<Layer> layers;               // trunk then MTP blocks
  std::shared_ptr<const gguf::File> file;  // keeps the mapping alive

  // Binds every tensor; throws gdn::Error naming the file, tensor, expected and found
  // type/shape for anything missing or malformed.
  static Model load(std::shared_ptr<const gguf::File> file);
  static Model load(const std::string& path);
  // Bytes of weights a decode token reads (everything but the embedding table).
  uint64_t decode_weight_bytes() const;
};

}  // namespace gdn::model
