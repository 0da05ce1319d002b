// The Qwen3.5 pre-tokenizer: splits text into the pieces BPE runs on, exactly like the
// split regex of its tokenizer.json (llama.cpp pre-tokenizer name "qwen35"):
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ | \p{N}
//   | ' '?[^\s\p{L}\p{M}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
//
// Alternatives are tried in order at each position and the first that matches wins, as in a
// backtracking regex engine. Hand-written because no regex library here handles \p{..} and
// the lookahead together. Qwen2/Qwen3 ("qwen2") differ: they have no \p{M} in the rule.
#pragma once

#include <string_view>
#include <vector>

namespace gdn::text {

// Pieces are views into `text` and cover it completely, in order. Bytes that are not valid
// UTF-8 are treated as punctuation-like characters so any byte string can be tokenized.
std::vector<std::string_view> pretokenize(std::string_view text);

}  // namespace gdn::text
