// Limits and shape rules shared by the GGUF reader and writer, so that whatever the writer
// accepts the reader accepts too.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "quant/types.h"

namespace gdn::gguf::detail {

inline constexpr uint32_t kVersion = 3;
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr const char* kAlignmentKey = "general.alignment";
inline constexpr size_t kMaxDims = 4;
// Deeper nesting has no use in real files and would let a hostile file recurse without end.
inline constexpr int kMaxArrayDepth = 8;

inline bool is_power_of_two(uint64_t x) {
  return x != 0 && (x & (x - 1)) == 0;
}
// Caller guarantees x + a - 1 does not overflow (x is a file position or a checked offset).
inline uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) & ~(a - 1);
}

// Sets `bytes` to the tensor's data size and returns "" when the shape is valid for the
// type; otherwise returns what is wrong (the caller adds the file/tensor/offset).
std::string check_shape(quant::Type t, std::span<const int64_t> ne, uint64_t& bytes);

}  // namespace gdn::gguf::detail
