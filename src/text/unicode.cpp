#include "text/unicode.h"

#include <utf8proc.h>

#include <array>

namespace gdn::text {

Utf8Char decode_utf8(std::string_view s, size_t pos) {
  if (static_cast<uint8_t>(s[pos]) < 0x80) return {static_cast<char32_t>(s[pos]), 1};
  utf8proc_int32_t cp = 0;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data() + pos);
  const utf8proc_ssize_t n =
      utf8proc_iterate(p, static_cast<utf8proc_ssize_t>(s.size() - pos), &cp);
  if (n <= 0) return {kInvalidCodepoint, 1};
  return {static_cast<char32_t>(cp), static_cast<size_t>(n)};
}

void append_utf8(std::string& out, char32_t cp) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

namespace {

bool is_continuation(uint8_t b) {
  return (b & 0xC0) == 0x80;
}

// Bytes a sequence starting with `lead` needs, 0 when `lead` cannot start one.
size_t sequence_length(uint8_t lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// The second byte is where overlongs, surrogates and > U+10FFFF show up.
bool valid_second_byte(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return is_continuation(b);
  }
}

}  // namespace

size_t utf8_complete_prefix(std::string_view s) {
  // An unfinished sequence is a lead byte followed by at most 2 continuation bytes.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto lead = static_cast<uint8_t>(s[n - back]);
    if (is_continuation(lead)) continue;
    const size_t need = sequence_length(lead);
    const bool unfinished =
        need > back &&
        (back == 1 || valid_second_byte(lead, static_cast<uint8_t>(s[n - back + 1])));
    return unfinished ? n - back : n;
  }
  return n;
}

bool is_regex_space(char32_t cp) {
  if (cp == kInvalidCodepoint) return false;
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x85) return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

namespace {

CharClass classify(char32_t cp) {
  if (cp == '\r' || cp == '\n') return CharClass::newline;
  if (cp == kInvalidCodepoint) return CharClass::other;
  if (is_regex_space(cp)) return CharClass::space;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return CharClass::letter;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
      return CharClass::mark;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return CharClass::number;
    default:
      return CharClass::other;
  }
}

}  // namespace

CharClass char_class(char32_t cp) {
  // Most text is mostly ASCII; look those up in a table built from the same rules.
  static const auto ascii = [] {
    std::array<CharClass, 128> t{};
    for (char32_t c = 0; c < 128; ++c) t[c] = classify(c);
    return t;
  }();
  return cp < 128 ? ascii[cp] : classify(cp);
}

}  // namespace gdn::text
