#include "text/pretokenize.h"

#include "text/unicode.h"

namespace gdn::text {

namespace {

// The text classified once, so every alternative can look ahead by characters. Code points
// are decoded again only where a rule names a specific character.
struct Chars {
  std::string_view text;
  std::vector<CharClass> cls;
  std::vector<size_t> offset;  // byte offset of each character, plus one for the end

  explicit Chars(std::string_view t) : text(t) {
    // At most one character per byte; reserving spares the reallocation copies.
    cls.reserve(text.size());
    offset.reserve(text.size() + 1);
    for (size_t pos = 0; pos < text.size();) {
      const Utf8Char c = decode_utf8(text, pos);
      cls.push_back(char_class(c.cp));
      offset.push_back(pos);
      pos += c.len;
    }
    offset.push_back(text.size());
  }
  size_t size() const { return cls.size(); }
  char32_t cp(size_t i) const { return i < size() ? decode_utf8(text, offset[i]).cp : 0; }
  bool is(size_t i, CharClass c) const { return i < size() && cls[i] == c; }
  bool letter_or_mark(size_t i) const { return is(i, CharClass::letter) || is(i, CharClass::mark); }
  bool is_space(size_t i) const { return is(i, CharClass::space) || is(i, CharClass::newline); }
};

// Case folding as (?i) applies it to the contraction letters: ASCII, plus U+017F (long s),
// whose simple case fold is 's'.
char32_t fold(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c - 'A' + 'a';
  if (c == 0x17F) return 's';
  return c;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)
size_t match_contraction(const Chars& t, size_t i) {
  if (t.cp(i) != '\'') return 0;
  const char32_t c1 = fold(t.cp(i + 1));
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  const char32_t c2 = fold(t.cp(i + 2));
  if ((c1 == 'r' || c1 == 'v') && c2 == 'e') return 3;
  if (c1 == 'l' && c2 == 'l') return 3;
  return 0;
}

// [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+
size_t match_word(const Chars& t, size_t i) {
  size_t j = i;
  const bool prefix = !t.is(i, CharClass::newline) && !t.is(i, CharClass::letter) &&
                      !t.is(i, CharClass::number) && t.letter_or_mark(i + 1);
  if (prefix) ++j;
  if (!t.letter_or_mark(j)) return 0;
  while (t.letter_or_mark(j)) ++j;
  return j - i;
}

// ' '?[^\s\p{L}\p{M}\p{N}]+[\r\n]*
size_t match_punctuation(const Chars& t, size_t i) {
  size_t j = i;
  if (t.cp(i) == ' ' && t.is(i + 1, CharClass::other)) ++j;
  if (!t.is(j, CharClass::other)) return 0;
  while (t.is(j, CharClass::other)) ++j;
  while (t.is(j, CharClass::newline)) ++j;
  return j - i;
}

// \s*[\r\n]+ | \s+(?!\S) | \s+ — all three over the whitespace run starting at i (i is a
// whitespace character, so the result is at least 1).
size_t match_whitespace(const Chars& t, size_t i) {
  size_t end = i;
  size_t after_last_newline = 0;
  for (; t.is_space(end); ++end) {
    if (t.cls[end] == CharClass::newline) after_last_newline = end + 1;
  }
  // \s*[\r\n]+ backtracks to the last newline of the run.
  if (after_last_newline != 0) return after_last_newline - i;
  // \s+(?!\S) gives the run's last character back when a non-space follows, unless that
  // would leave nothing; then \s+ takes the single character.
  if (end < t.size() && end - i >= 2) return end - 1 - i;
  return end - i;
}

size_t match_at(const Chars& t, size_t i) {
  if (const size_t n = match_contraction(t, i)) return n;
  if (const size_t n = match_word(t, i)) return n;
  if (t.is(i, CharClass::number)) return 1;  // \p{N}
  if (const size_t n = match_punctuation(t, i)) return n;
  // Only whitespace is left, and that always matches.
  return match_whitespace(t, i);
}

}  // namespace

std::vector<std::string_view> pretokenize(std::string_view text) {
  const Chars t(text);
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < t.size();) {
    const size_t n = match_at(t, i);
    pieces.push_back(text.substr(t.offset[i], t.offset[i + n] - t.offset[i]));
    i += n;
  }
  return pieces;
}

}  // namespace gdn::text
