// Byte-level BPE: GPT-2's byte <-> character mapping and rank-ordered merging over token ids.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gdn::text {

// GPT-2 spells every byte as a printable character so vocab entries are valid text:
// bytes 0x21..0x7E, 0xA1..0xAC and 0xAE..0xFF stand for themselves, the other 68 bytes
// map in order to U+0100.. (so ' ' is 'Ġ', U+0120).
char32_t byte_to_char(uint8_t b);
// The inverse; -1 for a character no byte maps to.
int char_to_byte(char32_t c);

class Bpe {
 public:
  Bpe() = default;
  // byte_tokens[b] is the id of the token spelling byte b.
  explicit Bpe(const std::array<int32_t, 256>& byte_tokens) : byte_tokens_(byte_tokens) {}

  // Merges apply lowest rank first; each call's rank is the number of earlier calls.
  void add_merge(int32_t left, int32_t right, int32_t result);
  void reserve(size_t merges) { merges_.reserve(merges); }

  // Appends the ids of one pre-tokenized piece (raw bytes). O(n log n) in its length: a heap
  // of candidate pairs, stale entries skipped when popped.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  const Merge* find(int32_t left, int32_t right) const;

  std::array<int32_t, 256> byte_tokens_{};
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace gdn::text
