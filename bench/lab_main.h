// The labs' main() (runs the lab and turns an exception into a message and exit status 2) and
// their median.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <vector>

namespace gdn::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline int lab_main(const char* name, int (*run)()) {
  try {
    return run();
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", name, e.what());
    return 2;
  }
}

}  // namespace gdn::bench
