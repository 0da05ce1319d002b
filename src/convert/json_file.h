// Reading the small JSON files of an HF checkpoint directory.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace gdn::convert {

// Parses the file; throws gdn::Error naming it when it cannot be read or is not JSON.
nlohmann::json read_json_file(const std::string& path);

}  // namespace gdn::convert
