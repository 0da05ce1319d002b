// Token id lists as the command line spells them: "1,2,3".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gdn {

// Throws gdn::Error naming the bad entry and its position.
std::vector<int32_t> parse_ids(std::string_view text);
std::string format_ids(const std::vector<int32_t>& ids);

}  // namespace gdn
