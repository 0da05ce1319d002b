// The labs' main(): runs the lab and turns an exception into a message and exit status 2.
#pragma once

#include <fmt/format.h>

#include <exception>

namespace gdn::bench {

inline int lab_main(const char* name, int (*run)()) {
  try {
    return run();
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", name, e.what());
    return 2;
  }
}

}  // namespace gdn::bench
