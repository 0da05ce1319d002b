// Random-weight qwen35 models with exactly llama.cpp's tensor table and metadata, for
// benchmarks and tests (no real checkpoint needed). Values are scaled so activations stay
// O(1) through every layer: matrices uniform with std 1/sqrt(n_in), norm weights near 1,
// A_log and dt_bias spread over a range so no per-head constant hides a bug.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/hparams.h"
#include "model/tensors.h"
#include "model/weights.h"
#include "quant/types.h"

namespace gdn::synth {

// "bonsai-27b", "qwen35-0.8b", "tiny"; throws naming the known presets otherwise.
model::HParams preset(const std::string& name);
std::vector<std::string> preset_names();

struct Options {
  quant::Type type = quant::Type::Q8_0;  // matrices; ssm_alpha/beta BF16 when quantised
  uint64_t seed = 1;
  bool tied_output = false;
  // A tokenizer to embed (the tokenizer.* keys of, e.g., a vocabulary-only GGUF): the model's
  // n_vocab becomes its token count, so every id it encodes has an embedding row and a logit.
  std::shared_ptr<const gguf::Metadata> tokenizer;
  // Called after each tensor is generated (when the GGUF is written or built in memory, not
  // when it is declared): bytes generated so far and bytes in all.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// Storage type of a tensor of the given kind under `type` (the rule Bonsai files follow).
quant::Type storage_type(model::TensorKind kind, quant::Type type);

// Adds metadata and every tensor (filled lazily, deterministic per tensor name and seed).
// Returns the hyper-parameters written: hp, with n_vocab from opts.tokenizer when given.
model::HParams add_model(gguf::Writer& w, const model::HParams& hp, const Options& opts);

// A synthetic model living in memory (the GGUF bytes and the model bound to them).
struct InMemory {
  std::vector<uint8_t> bytes;
  std::shared_ptr<const gguf::File> file;
  model::Model model;
};
std::unique_ptr<InMemory> make_in_memory(const model::HParams& hp, const Options& opts);

}  // namespace gdn::synth
