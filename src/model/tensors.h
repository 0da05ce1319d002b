// The qwen35 tensor table: every tensor name with its ggml shape, as llama.cpp's qwen35
// loader expects it. One source of truth for the loader (checks), the synthetic-model writer
// (creates) and the HF converter (maps onto it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/hparams.h"

namespace gdn::model {

// How a tensor may be stored. Matrices take any weight format; vectors (norms, biases,
// per-head constants) and the conv kernel are kept F32 like llama.cpp does.
enum class TensorKind {
  Matrix,      // {in, out}: quantisable
  GateMatrix,  // ssm_alpha / ssm_beta {E, Hv}: small; Bonsai keeps them BF16
  Vector,      // F32 (F16/BF16 accepted and widened at load)
  Conv,        // ssm_conv1d {kernel, conv_dim}, F32
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> ne;  // ggml order {in, out}
  TensorKind kind;
  bool required = true;
};

// Names follow llama.cpp: "token_embd.weight", "blk.3.attn_qkv.weight", "blk.3.ssm_a", ...
std::string block_tensor_name(int64_t il, const std::string& base);
// The whole table; `output.weight` is listed as optional (absent -> tied to token_embd), as
// are the optional MTP head tensors.
std::vector<TensorSpec> tensor_specs(const HParams& hp);

}  // namespace gdn::model
