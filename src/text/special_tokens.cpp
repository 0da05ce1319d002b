#include "text/special_tokens.h"

#include <algorithm>

namespace gdn::text {

void SpecialTokens::add(std::string_view text, int32_t id, bool control) {
  if (text.empty()) return;
  first_byte_[static_cast<uint8_t>(text[0])] = true;
  uint32_t node = 0;
  for (const char c : text) {
    auto& next = nodes_[node].next;
    const auto it = std::find_if(next.begin(), next.end(), [c](auto& e) { return e.first == c; });
    if (it != next.end()) {
      node = it->second;
      continue;
    }
    next.emplace_back(c, static_cast<uint32_t>(nodes_.size()));
    node = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[node].id = id;
  nodes_[node].control = control;
}

SpecialTokens::Match SpecialTokens::longest_at(std::string_view text, size_t pos,
                                               bool include_control) const {
  Match best;
  uint32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& next = nodes_[node].next;
    const auto it =
        std::find_if(next.begin(), next.end(), [c = text[i]](auto& e) { return e.first == c; });
    if (it == next.end()) break;
    node = it->second;
    const Node& n = nodes_[node];
    if (n.id >= 0 && (include_control || !n.control)) best = {pos, i + 1 - pos, n.id};
  }
  return best;
}

SpecialTokens::Match SpecialTokens::find(std::string_view text, size_t from,
                                         bool include_control) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) continue;
    if (const Match m = longest_at(text, pos, include_control); m.id >= 0) return m;
  }
  return {};
}

}  // namespace gdn::text
