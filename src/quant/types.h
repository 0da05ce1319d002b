// ggml tensor types that gdn.cpp understands, with their block geometry.
// The byte layouts are a file-format contract (DESIGN.md §3); ids are ggml's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gdn::quant {

enum class Type : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q8_0 = 8,
  BF16 = 30,
  Q1_0 = 41,
  Q2_0 = 42,
  PQ2_0 = 142,
};

struct TypeInfo {
  Type type;
  std::string_view name;  // lower-case, as llama.cpp prints it ("q1_0")
  int64_t block_elems;    // elements per block (1 for plain floats)
  size_t block_bytes;     // bytes per block
};

// nullptr when the id is not a type gdn.cpp supports.
const TypeInfo* find_type(uint32_t ggml_id);
// Throws gdn::Error for unknown ids.
const TypeInfo& type_info(Type t);
// Parses "q1_0", "f32", ... (case-insensitive); throws naming the bad string.
Type parse_type(std::string_view name);

// Bytes of a row of n elements. Throws when n is not a multiple of the block size
// or the size overflows.
size_t row_bytes(Type t, int64_t n);

}  // namespace gdn::quant
