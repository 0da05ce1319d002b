// The Qwen3.5 tokenizer, built from a GGUF's tokenizer.ggml.* metadata: byte-level BPE
// ("gpt2") with the "qwen35" pre-tokenizer, special tokens matched in the raw text first.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "text/bpe.h"
#include "text/special_tokens.h"

namespace gdn::text {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

// The vocabulary as a GGUF stores it; ids absent from the file are -1.
struct VocabSpec {
  std::vector<std::string> tokens;  // normal tokens in GPT-2 byte characters, others as text
  std::vector<TokenType> types;
  std::vector<std::string> merges;  // "left right", best first
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t eot = -1;
  int32_t pad = -1;
  bool add_bos = false;
};

// Immutable once built: encode and decode may run on several threads at once.
class Tokenizer {
 public:
  // Reads only metadata, so vocab-only GGUFs work. Refuses tokenizer models other than
  // "gpt2" and pre-tokenizers other than "qwen35", naming what it found.
  static Tokenizer from_metadata(const gguf::Metadata& meta);
  static Tokenizer from_gguf(const gguf::File& file) { return from_metadata(file.meta()); }
  static Tokenizer load(const std::string& gguf_path);

  // Throws gdn::Error on an inconsistent vocabulary (bad ids, merges of unknown tokens, normal
  // tokens outside the byte mapping).
  explicit Tokenizer(VocabSpec spec);

  // parse_special: control tokens written in the text become their ids; otherwise they are
  // tokenized as plain text. User-defined tokens always match. Never adds BOS (see add_bos).
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // Concatenated piece() bytes. Throws on ids outside the vocabulary.
  std::string decode(std::span<const int32_t> ids) const;

  // The bytes an id stands for: byte-mapped text for normal tokens, the text itself for
  // control and user-defined ones. May be an incomplete UTF-8 sequence.
  const std::string& piece(int32_t id) const;
  // The vocabulary entry as stored in the GGUF (normal tokens in byte characters: "Ġthe").
  const std::string& token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;

  size_t n_vocab() const { return text_.size(); }
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }
  int32_t pad() const { return pad_; }
  // Whether prompts should start with bos() (tokenizer.ggml.add_bos_token; Qwen: false).
  bool add_bos() const { return add_bos_; }
  // End of generation: eos, eot, and the control tokens <|im_end|> and <|endoftext|>.
  bool is_eog(int32_t id) const;

 private:
  void check_id(int32_t id) const;
  // Real text repeats its words a lot: a piece already encoded in this call is copied from
  // its [start, end) range in the output instead of running BPE again.
  using PieceCache = std::unordered_map<std::string_view, std::pair<size_t, size_t>>;
  void encode_plain(std::string_view text, std::vector<int32_t>& out, PieceCache& seen) const;

  std::vector<std::string> text_;
  std::vector<std::string> piece_;
  std::vector<TokenType> type_;
  Bpe bpe_;
  SpecialTokens special_;
  std::vector<int32_t> eog_;
  int32_t bos_ = -1, eos_ = -1, eot_ = -1, pad_ = -1;
  bool add_bos_ = false;
};

// Buffers bytes until they form whole UTF-8 characters, so a token that ends mid-character
// never reaches the output half-printed. The concatenation of everything push() and flush()
// return equals Tokenizer::decode of the same ids (invalid bytes pass through unchanged).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(&tok) {}
  std::string push(int32_t id);
  // Whatever is still held back (an unfinished sequence at the end of the stream).
  std::string flush();

 private:
  const Tokenizer* tok_;
  std::string pending_;
};

}  // namespace gdn::text
