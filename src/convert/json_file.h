// Reading the small JSON files of an HF checkpoint directory.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"

namespace gdn::convert {

// Parses the file; throws gdn::Error naming it when it cannot be read or is not JSON.
nlohmann::json read_json_file(const std::string& path);

// Runs f, which reads JSON documents from `what` (files named in messages), and turns a JSON
// library exception (a value of another type than the code expected) into a gdn::Error naming
// them: the places that check types name the field themselves, this catches the rest.
template <typename F>
auto with_json_errors(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: unexpected value: {}", what, e.what());
  }
}

}  // namespace gdn::convert
