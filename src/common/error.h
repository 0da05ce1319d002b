// One exception type for every user-facing failure: bad files, bad shapes, bad flags.
// Messages name the thing that is wrong (file, key, tensor, type, shape, byte offset).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace gdn {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace gdn
