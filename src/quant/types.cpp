#include "quant/types.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>
#include <string>

#include "common/error.h"

namespace gdn::quant {
namespace {

constexpr std::array<TypeInfo, 8> kTypes = {{
    {Type::F32, "f32", 1, 4},
    {Type::F16, "f16", 1, 2},
    {Type::Q4_0, "q4_0", 32, 2 + 16},
    {Type::Q8_0, "q8_0", 32, 2 + 32},
    {Type::BF16, "bf16", 1, 2},
    {Type::Q1_0, "q1_0", 128, 2 + 16},
    {Type::Q2_0, "q2_0", 64, 2 + 16},
    {Type::PQ2_0, "pq2_0", 128, 2 + 32},
}};

}  // namespace

const TypeInfo* find_type(uint32_t ggml_id) {
  for (const auto& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == ggml_id) return &t;
  }
  return nullptr;
}

const TypeInfo& type_info(Type t) {
  const TypeInfo* info = find_type(static_cast<uint32_t>(t));
  if (!info) fail("unsupported ggml type id {}", static_cast<uint32_t>(t));
  return *info;
}

Type parse_type(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const auto& t : kTypes) {
    if (t.name == lower) return t.type;
  }
  std::string known;
  for (const auto& t : kTypes) known += fmt::format("{}{}", known.empty() ? "" : ", ", t.name);
  fail("unknown weight type '{}' (known: {})", name, known);
}

size_t row_bytes(Type t, int64_t n) {
  const TypeInfo& info = type_info(t);
  if (n < 0 || n % info.block_elems != 0) {
    fail("row of {} elements is not a multiple of the {} block size {}", n, info.name,
         info.block_elems);
  }
  const uint64_t blocks = static_cast<uint64_t>(n / info.block_elems);
  if (blocks > std::numeric_limits<uint64_t>::max() / info.block_bytes) {
    fail("row of {} {} elements overflows a 64-bit byte count", n, info.name);
  }
  return blocks * info.block_bytes;
}

}  // namespace gdn::quant
