#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>
#include <numeric>

#include "common/error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"

namespace gdn::gguf {
namespace {

bool is_integer(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::UINT16:
    case ValueType::INT16:
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::UINT64:
    case ValueType::INT64:
      return true;
    default:
      return false;
  }
}

[[noreturn]] void wrong_type(const std::string& label, const char* expected, ValueType found) {
  fail("metadata key '{}': expected {}, found {}", label, expected, value_type_name(found));
}

// `label` is the key, plus "[i]" for array elements, so errors point at the exact value.
int64_t to_int(const std::string& label, const Value& v) {
  if (!is_integer(v.type)) wrong_type(label, "an integer", v.type);
  if (const auto* s = std::get_if<int64_t>(&v.data)) return *s;
  const auto* u = std::get_if<uint64_t>(&v.data);
  if (!u) fail("metadata key '{}': {} value holds no integer", label, value_type_name(v.type));
  if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    fail("metadata key '{}': {} value {} does not fit in int64", label, value_type_name(v.type),
         *u);
  }
  return static_cast<int64_t>(*u);
}

double to_float(const std::string& label, const Value& v) {
  if (v.type == ValueType::FLOAT32 || v.type == ValueType::FLOAT64) {
    if (const auto* d = std::get_if<double>(&v.data)) return *d;
    fail("metadata key '{}': {} value holds no number", label, value_type_name(v.type));
  }
  if (is_integer(v.type)) {
    if (const auto* u = std::get_if<uint64_t>(&v.data)) return static_cast<double>(*u);
    return static_cast<double>(to_int(label, v));
  }
  wrong_type(label, "a float", v.type);
}

const std::string& to_string(const std::string& label, const Value& v) {
  const auto* s = std::get_if<std::string>(&v.data);
  if (v.type != ValueType::STRING || !s) wrong_type(label, "a string", v.type);
  return *s;
}

template <typename T>
Value array_of(ValueType elem, const std::vector<T>& v, Value (*make)(T)) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (const T& x : v) items.push_back(make(x));
  return Value::array(elem, std::move(items));
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
      return "uint8";
    case ValueType::INT8:
      return "int8";
    case ValueType::UINT16:
      return "uint16";
    case ValueType::INT16:
      return "int16";
    case ValueType::UINT32:
      return "uint32";
    case ValueType::INT32:
      return "int32";
    case ValueType::FLOAT32:
      return "float32";
    case ValueType::BOOL:
      return "bool";
    case ValueType::STRING:
      return "string";
    case ValueType::ARRAY:
      return "array";
    case ValueType::UINT64:
      return "uint64";
    case ValueType::INT64:
      return "int64";
    case ValueType::FLOAT64:
      return "float64";
  }
  return "unknown";
}

Value Value::strings(const std::vector<std::string>& v) {
  return array_of<std::string>(ValueType::STRING, v, &Value::str);
}
Value Value::i32s(const std::vector<int32_t>& v) {
  return array_of<int32_t>(ValueType::INT32, v, &Value::i32);
}
Value Value::f32s(const std::vector<float>& v) {
  return array_of<float>(ValueType::FLOAT32, v, &Value::f32);
}

const Value* Metadata::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

namespace {
const Value& require(const Metadata& m, const std::string& key) {
  const Value* v = m.find(key);
  if (!v) fail("metadata key '{}' is missing", key);
  return *v;
}
}  // namespace

int64_t Metadata::get_int(const std::string& key) const {
  return to_int(key, require(*this, key));
}

int64_t Metadata::get_int(const std::string& key, int64_t fallback) const {
  const Value* v = find(key);
  return v ? to_int(key, *v) : fallback;
}

double Metadata::get_float(const std::string& key) const {
  return to_float(key, require(*this, key));
}

double Metadata::get_float(const std::string& key, double fallback) const {
  const Value* v = find(key);
  return v ? to_float(key, *v) : fallback;
}

bool Metadata::get_bool(const std::string& key, bool fallback) const {
  const Value* v = find(key);
  if (!v) return fallback;
  const auto* b = std::get_if<bool>(&v->data);
  if (v->type != ValueType::BOOL || !b) wrong_type(key, "a bool", v->type);
  return *b;
}

const std::string& Metadata::get_string(const std::string& key) const {
  return to_string(key, require(*this, key));
}

std::string Metadata::get_string(const std::string& key, const std::string& fallback) const {
  const Value* v = find(key);
  return v ? to_string(key, *v) : fallback;
}

const Array& Metadata::get_array(const std::string& key) const {
  const Value& v = require(*this, key);
  const auto* a = std::get_if<Array>(&v.data);
  if (v.type != ValueType::ARRAY || !a) wrong_type(key, "an array", v.type);
  return *a;
}

std::vector<int64_t> Metadata::get_int_array(const std::string& key) const {
  const Array& a = get_array(key);
  if (!is_integer(a.elem)) {
    fail("metadata key '{}': expected an integer array, found an array of {}", key,
         value_type_name(a.elem));
  }
  std::vector<int64_t> out;
  out.reserve(a.items.size());
  for (size_t i = 0; i < a.items.size(); ++i) {
    out.push_back(to_int(fmt::format("{}[{}]", key, i), a.items[i]));
  }
  return out;
}

std::vector<std::string> Metadata::get_string_array(const std::string& key) const {
  const Array& a = get_array(key);
  if (a.elem != ValueType::STRING) {
    fail("metadata key '{}': expected a string array, found an array of {}", key,
         value_type_name(a.elem));
  }
  std::vector<std::string> out;
  out.reserve(a.items.size());
  for (size_t i = 0; i < a.items.size(); ++i) {
    out.push_back(to_string(fmt::format("{}[{}]", key, i), a.items[i]));
  }
  return out;
}

int64_t TensorInfo::n_elements() const {
  return std::accumulate(ne.begin(), ne.end(), int64_t{1}, std::multiplies<>());
}

std::string TensorInfo::shape_str() const {
  return fmt::format("[{}]", fmt::join(ne, ", "));
}

namespace detail {

std::string check_shape(quant::Type t, std::span<const int64_t> ne, uint64_t& bytes) {
  const quant::TypeInfo* info = quant::find_type(static_cast<uint32_t>(t));
  if (!info) return fmt::format("unknown ggml type id {}", static_cast<uint32_t>(t));
  if (ne.empty() || ne.size() > kMaxDims) {
    return fmt::format("{} dimensions (must be 1..{})", ne.size(), kMaxDims);
  }
  int64_t elems = 1;
  for (size_t i = 0; i < ne.size(); ++i) {
    if (ne[i] < 0) return fmt::format("dimension {} is negative ({})", i, ne[i]);
    if (__builtin_mul_overflow(elems, ne[i], &elems)) {
      return fmt::format("element count of shape [{}] overflows int64", fmt::join(ne, ", "));
    }
  }
  if (ne[0] % info->block_elems != 0) {
    return fmt::format("row length {} is not a multiple of the {} block size {}", ne[0], info->name,
                       info->block_elems);
  }
  uint64_t size = static_cast<uint64_t>(ne[0] / info->block_elems);
  bool overflow = __builtin_mul_overflow(size, uint64_t{info->block_bytes}, &size);
  for (size_t i = 1; i < ne.size(); ++i) {
    overflow = overflow || __builtin_mul_overflow(size, static_cast<uint64_t>(ne[i]), &size);
  }
  if (overflow) {
    return fmt::format("byte size of {} tensor [{}] overflows uint64", info->name,
                       fmt::join(ne, ", "));
  }
  bytes = size;
  return "";
}

}  // namespace detail
}  // namespace gdn::gguf
