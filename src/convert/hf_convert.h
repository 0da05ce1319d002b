// HuggingFace Qwen3.5 checkpoint (safetensors + config.json) -> qwen35 GGUF, following
// llama.cpp's converter conventions (see NOTES.md next to this file for the sources).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/hparams.h"
#include "quant/types.h"

namespace gdn::convert {

// Receives one line per notable decision (skipped vision tensors, type fallbacks, ...).
using Log = std::function<void(const std::string&)>;

// What config.json says, reduced to what the conversion needs.
struct HfConfig {
  model::HParams hp;  // n_nextn as declared; layer kinds from layer_types
  bool tie_word_embeddings = false;
  std::string lm_prefix;  // "model." (text-only) or "model.language_model." (multimodal)
};

// Accepts Qwen3_5ForCausalLM (model_type qwen3_5_text) and Qwen3_5ForConditionalGeneration
// (model_type qwen3_5 with text_config). Throws gdn::Error naming the field for anything
// missing, unsupported or inconsistent.
HfConfig parse_hf_config(const nlohmann::json& config);

// HF stores value heads grouped by key head (head h uses key head h / (Hv/Hk)); ggml wants them
// tiled (head h uses key head h % Hk). Returns, for each tiled head, the grouped head it takes.
std::vector<int64_t> tiled_v_head_order(int64_t n_k_heads, int64_t n_v_heads);

// Converts hf_dir (config.json, model.safetensors[.index.json], optional tokenizer files) into
// out_gguf. Matrices are stored as `type`; norms, biases, per-head constants and the conv
// kernel as F32; ssm_alpha/ssm_beta as BF16 when `type` is quantised. A matrix whose rows do
// not fit `type`'s block is stored as F16 with a log line, as llama.cpp's converter does.
void convert_hf(const std::string& hf_dir, const std::string& out_gguf, quant::Type type,
                const Log& log = {});

}  // namespace gdn::convert
