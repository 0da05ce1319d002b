// llama.cpp's "gpt2" tokenizer metadata from an HF tokenizer.json / tokenizer_config.json
// (the conventions of llama.cpp's _set_vocab_gpt2 and gguf-py SpecialVocab; see NOTES.md).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "convert/hf_convert.h"

namespace gdn::gguf {
class Metadata;
}

namespace gdn::convert {

// Adds tokenizer.ggml.* (model "gpt2", pre "qwen35", tokens, token_type, merges, special ids,
// add_*_token flags) and tokenizer.chat_template to `meta`. `config` is config.json (special
// ids missing from tokenizer_config.json are taken from it). Returns false and adds nothing
// when hf_dir has no tokenizer.json; throws gdn::Error on a malformed or non-BPE tokenizer.
bool add_hf_tokenizer(const std::string& hf_dir, const nlohmann::json& config, int64_t n_vocab,
                      gguf::Metadata& meta, const Log& log);

}  // namespace gdn::convert
