// The message of the gdn::Error a call throws, for tests that check what an error names.
#pragma once

#include <string>

#include "common/error.h"

namespace gdn::testing {

// Runs f and returns the message of the gdn::Error it throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace gdn::testing
