// A stored weight matrix as the file holds it. C++17-clean: CUDA code (built as C++17)
// includes it too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "quant/types.h"

namespace gdn::model {

// A stored matrix {n_in, n_out}: n_out rows of n_in elements, each row `row_bytes` long.
struct Matrix {
  std::string name;
  quant::Type type = quant::Type::F32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  size_t row_bytes = 0;
  const uint8_t* data = nullptr;

  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
  size_t bytes() const { return row_bytes * static_cast<size_t>(n_out); }
  explicit operator bool() const { return data != nullptr; }
};

}  // namespace gdn::model
