#include "text/bpe.h"

#include <queue>

namespace gdn::text {

namespace {

bool is_printable_byte(uint8_t b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

// Both directions of the mapping, built once.
struct ByteTable {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 0x144> to_byte{};  // the mapped characters all lie below U+0144

  ByteTable() {
    to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_char[b] = is_printable_byte(static_cast<uint8_t>(b)) ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

uint64_t pair_key(int32_t left, int32_t right) {
  return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
}

}  // namespace

char32_t byte_to_char(uint8_t b) {
  return byte_table().to_char[b];
}

int char_to_byte(char32_t c) {
  const auto& t = byte_table().to_byte;
  return c < t.size() ? t[c] : -1;
}

void Bpe::add_merge(int32_t left, int32_t right, int32_t result) {
  // A repeated pair keeps its first (best) rank, as in HF tokenizers.
  merges_.try_emplace(pair_key(left, right), Merge{static_cast<int32_t>(merges_.size()), result});
}

const Bpe::Merge* Bpe::find(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void Bpe::encode(std::string_view piece, std::vector<int32_t>& out) const {
  // Symbols form a linked list over the piece's bytes; a merge folds the right symbol into
  // the left one, so symbol 0 always heads the list.
  struct Symbol {
    int32_t id;  // -1 once merged away
    int32_t prev, next;
  };
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, result;
    // Lowest rank first, leftmost first among equal ranks (HF tokenizers' order).
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };

  const auto n = static_cast<int32_t>(piece.size());
  std::vector<Symbol> sym(n);
  for (int32_t i = 0; i < n; ++i) {
    sym[i] = {byte_tokens_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    if (const Merge* m = find(sym[left].id, sym[right].id)) {
      heap.push({m->rank, left, right, sym[left].id, sym[right].id, m->result});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = sym[c.left];
    Symbol& right = sym[c.right];
    // Ids only grow into longer tokens, so an unchanged id pair still adjacent is this pair.
    if (left.id != c.left_id || left.next != c.right || right.id != c.right_id) continue;
    left.id = c.result;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = c.left;
    right.id = -1;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }

  for (int32_t i = 0; i >= 0 && i < n; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace gdn::text
