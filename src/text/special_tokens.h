// Finds control and user-defined tokens (<|im_start|>, <think>, ...) in raw text, before
// pre-tokenization, the way HF tokenizers splits on added tokens: leftmost match first,
// longest among those starting at the same place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace gdn::text {

class SpecialTokens {
 public:
  struct Match {
    size_t pos = std::string_view::npos;  // npos: none
    size_t len = 0;
    int32_t id = -1;
  };

  // `control` tokens are matched only when the caller asks for them (parse_special);
  // user-defined ones always are, as llama.cpp does.
  void add(std::string_view text, int32_t id, bool control);
  Match find(std::string_view text, size_t from, bool include_control) const;

 private:
  // A byte trie: few hundred tokens, short texts, almost all starting with '<' or '['.
  struct Node {
    std::vector<std::pair<char, uint32_t>> next;
    int32_t id = -1;
    bool control = false;
  };
  Match longest_at(std::string_view text, size_t pos, bool include_control) const;

  std::vector<Node> nodes_{1};
  bool first_byte_[256] = {};
};

}  // namespace gdn::text
