#include "common/ids.h"

#include <charconv>

#include <fmt/ranges.h>

#include "common/error.h"

namespace gdn {

std::vector<int32_t> parse_ids(std::string_view text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(pos, end - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    int32_t v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size() || v < 0) {
      fail("bad token id '{}' at entry {} of the id list", item, ids.size());
    }
    ids.push_back(v);
    pos = end + 1;
  }
  return ids;
}

std::string format_ids(const std::vector<int32_t>& ids) {
  return fmt::format("{}", fmt::join(ids, ","));
}

}  // namespace gdn
