#include "text/tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>

#include "common/error.h"
#include "text/pretokenize.h"
#include "text/unicode.h"

namespace gdn::text {

namespace {

using TokenIndex = std::unordered_map<std::string_view, int32_t>;

TokenIndex index_tokens(const std::vector<std::string>& tokens) {
  TokenIndex index;
  index.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) index.try_emplace(tokens[i], static_cast<int32_t>(i));
  return index;
}

int32_t lookup(const TokenIndex& index, std::string_view text) {
  const auto it = index.find(text);
  return it == index.end() ? -1 : it->second;
}

bool is_byte_level(TokenType t) {
  return t == TokenType::normal || t == TokenType::byte;
}

// BPE's output is decoded by unmapping each token's GPT-2 characters, which only byte-level
// tokens get: a control token standing for a byte would decode as its spelling ("ĉ", not "\t").
// `role` (what the token is for, in the message) is formatted only on failure: a real vocabulary
// checks ~450k merge tokens.
template <typename Role>
void require_byte_level(const std::vector<TokenType>& types, int32_t id, Role&& role) {
  if (!is_byte_level(types[id])) {
    fail("tokenizer: token {} ({}) has type {}, but BPE output must be a normal or byte token", id,
         role(), static_cast<int32_t>(types[id]));
  }
}

std::array<int32_t, 256> byte_tokens(const TokenIndex& index, const std::vector<TokenType>& types) {
  std::array<int32_t, 256> ids{};
  for (int b = 0; b < 256; ++b) {
    std::string text;
    append_utf8(text, byte_to_char(static_cast<uint8_t>(b)));
    ids[b] = lookup(index, text);
    if (ids[b] < 0) fail("tokenizer: vocabulary has no token for byte 0x{:02X} ('{}')", b, text);
    require_byte_level(types, ids[b], [b] { return fmt::format("byte 0x{:02X}", b); });
  }
  return ids;
}

void add_merges(Bpe& bpe, const std::vector<std::string>& merges, const TokenIndex& index,
                const std::vector<TokenType>& types) {
  bpe.reserve(merges.size());
  std::string joined;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string_view m = merges[i];
    const size_t space = m.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == m.size()) {
      fail("tokenizer: merge {} ('{}') is not of the form 'left right'", i, m);
    }
    const std::string_view left = m.substr(0, space), right = m.substr(space + 1);
    joined.assign(left).append(right);
    const int32_t l = lookup(index, left), r = lookup(index, right), j = lookup(index, joined);
    if (l < 0 || r < 0 || j < 0) {
      fail("tokenizer: merge {} ('{}') uses or makes a token not in the vocabulary", i, m);
    }
    for (const int32_t id : {l, r, j}) {
      require_byte_level(types, id, [i] { return fmt::format("merge {}", i); });
    }
    bpe.add_merge(l, r, j);
  }
}

// Normal tokens spell bytes with GPT-2 characters; map them back.
std::string unmap_bytes(const std::string& text, size_t id) {
  std::string bytes;
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = decode_utf8(text, pos);
    const int b = c.cp == kInvalidCodepoint ? -1 : char_to_byte(c.cp);
    if (b < 0) {
      fail(
          "tokenizer: token {} ('{}') is a byte-level token but has a character outside the "
          "GPT-2 byte mapping at byte {}",
          id, text, pos);
    }
    bytes.push_back(static_cast<char>(b));
    pos += c.len;
  }
  return bytes;
}

TokenType to_token_type(int64_t v, size_t id) {
  if (v < 1 || v > 6) fail("tokenizer: token {} has type {}, expected 1..6", id, v);
  return static_cast<TokenType>(v);
}

int32_t optional_id(const gguf::Metadata& meta, const std::string& key) {
  const int64_t id = meta.get_int(key, -1);
  if (id < -1 || id > INT32_MAX) fail("tokenizer: {} is {}, not a token id", key, id);
  return static_cast<int32_t>(id);
}

}  // namespace

Tokenizer Tokenizer::from_metadata(const gguf::Metadata& meta) {
  const std::string& model = meta.get_string("tokenizer.ggml.model");
  if (model != "gpt2") {
    fail("tokenizer: tokenizer.ggml.model is '{}'; only 'gpt2' (byte-level BPE) is supported",
         model);
  }
  // Qwen2/Qwen3 vocabularies ("qwen2") split letters without \p{M}; accepting them here would
  // silently tokenize text with combining marks differently from the reference.
  const std::string& pre = meta.get_string("tokenizer.ggml.pre");
  if (pre != "qwen35") {
    fail("tokenizer: pre-tokenizer '{}' (tokenizer.ggml.pre) is not supported; only 'qwen35' is",
         pre);
  }

  VocabSpec spec;
  spec.tokens = meta.get_string_array("tokenizer.ggml.tokens");
  const std::vector<int64_t> types = meta.get_int_array("tokenizer.ggml.token_type");
  if (types.size() != spec.tokens.size()) {
    fail("tokenizer: tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens has {}",
         types.size(), spec.tokens.size());
  }
  for (size_t i = 0; i < types.size(); ++i) spec.types.push_back(to_token_type(types[i], i));
  spec.merges = meta.get_string_array("tokenizer.ggml.merges");
  spec.bos = optional_id(meta, "tokenizer.ggml.bos_token_id");
  spec.eos = optional_id(meta, "tokenizer.ggml.eos_token_id");
  spec.eot = optional_id(meta, "tokenizer.ggml.eot_token_id");
  spec.pad = optional_id(meta, "tokenizer.ggml.padding_token_id");
  spec.add_bos = meta.get_bool("tokenizer.ggml.add_bos_token", false);
  return Tokenizer(std::move(spec));
}

Tokenizer Tokenizer::load(const std::string& gguf_path) {
  return from_gguf(gguf::File::open(gguf_path));
}

Tokenizer::Tokenizer(VocabSpec spec) : text_(std::move(spec.tokens)), type_(std::move(spec.types)) {
  if (type_.size() != text_.size()) {
    fail("tokenizer: {} token types for {} tokens", type_.size(), text_.size());
  }
  const TokenIndex index = index_tokens(text_);
  bpe_ = Bpe(byte_tokens(index, type_));
  add_merges(bpe_, spec.merges, index, type_);

  piece_.reserve(text_.size());
  for (size_t id = 0; id < text_.size(); ++id) {
    const TokenType t = type_[id];
    piece_.push_back(is_byte_level(t) ? unmap_bytes(text_[id], id) : text_[id]);
    if (t == TokenType::control || t == TokenType::unknown || t == TokenType::user_defined) {
      special_.add(text_[id], static_cast<int32_t>(id), t != TokenType::user_defined);
    }
  }

  const auto checked = [&](int32_t id, const char* what) {
    if (id < -1 || id >= static_cast<int32_t>(text_.size())) {
      fail("tokenizer: {} token id {} is outside the vocabulary of {}", what, id, text_.size());
    }
    return id;
  };
  bos_ = checked(spec.bos, "bos");
  eos_ = checked(spec.eos, "eos");
  // Qwen GGUFs usually carry no eot id, but every chat turn ends with <|im_end|>.
  eot_ = checked(spec.eot >= 0 ? spec.eot : lookup(index, "<|im_end|>"), "eot");
  pad_ = checked(spec.pad, "pad");
  add_bos_ = spec.add_bos;

  // End of generation as llama.cpp decides it: the eos and eot ids, plus <|im_end|> and
  // <|endoftext|> when they are control tokens, since a Qwen GGUF may name either one eos.
  const auto add_eog = [&](int32_t id) {
    if (id >= 0 && !is_eog(id)) eog_.push_back(id);
  };
  add_eog(eos_);
  add_eog(eot_);
  for (const char* text : {"<|im_end|>", "<|endoftext|>"}) {
    const int32_t id = lookup(index, text);
    if (id >= 0 && type_[id] == TokenType::control) add_eog(id);
  }
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= text_.size()) {
    fail("tokenizer: token id {} is outside the vocabulary [0, {})", id, text_.size());
  }
}

const std::string& Tokenizer::piece(int32_t id) const {
  check_id(id);
  return piece_[id];
}

const std::string& Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return text_[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id);
  return type_[id];
}

bool Tokenizer::is_eog(int32_t id) const {
  return std::find(eog_.begin(), eog_.end(), id) != eog_.end();
}

void Tokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out,
                             PieceCache& seen) const {
  for (const std::string_view piece : pretokenize(text)) {
    if (const auto it = seen.find(piece); it != seen.end()) {
      const auto [start, end] = it->second;
      for (size_t i = start; i < end; ++i) out.push_back(out[i]);
      continue;
    }
    const size_t start = out.size();
    bpe_.encode(piece, out);
    seen.emplace(piece, std::pair{start, out.size()});
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);  // typical bytes per token is 3-4
  PieceCache seen;
  for (size_t pos = 0; pos < text.size();) {
    const SpecialTokens::Match m = special_.find(text, pos, parse_special);
    const size_t plain_end = m.id >= 0 ? m.pos : text.size();
    encode_plain(text.substr(pos, plain_end - pos), out, seen);
    if (m.id < 0) break;
    out.push_back(m.id);
    pos = m.pos + m.len;
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (const int32_t id : ids) out += piece(id);
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_->piece(id);
  const size_t n = utf8_complete_prefix(pending_);
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::flush() {
  return std::exchange(pending_, {});
}

}  // namespace gdn::text
