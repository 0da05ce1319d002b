// UTF-8 coding and the character classes the Qwen3.5 pre-tokenizer splits on.
// Categories come from utf8proc, so they follow its Unicode version, not a hand-made table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gdn::text {

// Stands for a byte that starts no valid UTF-8 sequence; such bytes are kept one by one so
// arbitrary bytes still round-trip through the byte-level tokenizer.
inline constexpr char32_t kInvalidCodepoint = 0xFFFFFFFF;

struct Utf8Char {
  char32_t cp;  // kInvalidCodepoint for an invalid byte
  size_t len;   // bytes consumed, >= 1
};

// Decodes the character at s[pos] (pos < s.size()); rejects overlongs, surrogates and
// code points above U+10FFFF.
Utf8Char decode_utf8(std::string_view s, size_t pos);
void append_utf8(std::string& out, char32_t cp);

// Length of the longest prefix of s that does not end inside a UTF-8 sequence which more
// bytes could still complete. Invalid bytes count as complete: holding them back would
// stall a stream forever.
size_t utf8_complete_prefix(std::string_view s);

// The classes the split regex distinguishes. `newline` is \r or \n (both also \s);
// `space` is any other \s; `other` is everything that is neither \s, \p{L}, \p{M} nor \p{N}.
enum class CharClass : uint8_t { letter, mark, number, newline, space, other };
CharClass char_class(char32_t cp);

// \s as Oniguruma (the engine behind HF tokenizers) defines it: U+0009..U+000D, U+0085 and
// the Zs/Zl/Zp categories; this equals the Unicode White_Space property.
bool is_regex_space(char32_t cp);

}  // namespace gdn::text
