#include "convert/json_file.h"

#include <fstream>

#include "common/error.h"

namespace gdn::convert {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("{}: not valid JSON", path);
  return j;
}

}  // namespace gdn::convert
