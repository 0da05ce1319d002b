// GGUF v3: reader (mmap, every offset and size checked) and writer (streams tensor data).
//
// File layout: magic "GGUF", u32 version, u64 tensor count, u64 kv count, kv pairs,
// tensor infos (name, n_dims, ne[], type, offset), padding to general.alignment (default 32),
// then tensor data; every tensor offset is relative to the data section and aligned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "quant/types.h"

namespace gdn {
class MappedFile;
}

namespace gdn::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
const char* value_type_name(ValueType t);

struct Value;
struct Array {
  ValueType elem = ValueType::UINT8;
  std::vector<Value> items;
};

// A metadata value. Integers keep their declared width in `type` but are stored widened.
struct Value {
  ValueType type = ValueType::UINT32;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> data;

  static Value u32(uint32_t v) { return {ValueType::UINT32, uint64_t{v}}; }
  static Value u64(uint64_t v) { return {ValueType::UINT64, v}; }
  static Value i32(int32_t v) { return {ValueType::INT32, int64_t{v}}; }
  static Value f32(float v) { return {ValueType::FLOAT32, double{v}}; }
  static Value boolean(bool v) { return {ValueType::BOOL, v}; }
  static Value str(std::string v) { return {ValueType::STRING, std::move(v)}; }
  static Value array(ValueType elem, std::vector<Value> items) {
    return {ValueType::ARRAY, Array{elem, std::move(items)}};
  }
  static Value strings(const std::vector<std::string>& v);
  static Value i32s(const std::vector<int32_t>& v);
  static Value f32s(const std::vector<float>& v);
};

// Ordered key -> value map with typed accessors that throw gdn::Error naming the key,
// the expected type and the type found.
class Metadata {
 public:
  void set(const std::string& key, Value v) { kv_[key] = std::move(v); }
  void erase(const std::string& key) { kv_.erase(key); }
  const Value* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  const std::map<std::string, Value>& all() const { return kv_; }

  // Any integer type whose value fits; throws on missing key, wrong type, or overflow.
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key) const;  // FLOAT32/FLOAT64 (and integers)
  double get_float(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  const std::string& get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  const Array& get_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;

 private:
  std::map<std::string, Value> kv_;
};

struct TensorInfo {
  std::string name;
  quant::Type type = quant::Type::F32;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the contiguous (row) dimension
  uint64_t offset = 0;      // relative to the data section
  uint64_t size = 0;        // bytes
  const uint8_t* data = nullptr;

  int64_t n_elements() const;
  std::string shape_str() const;  // "[5120, 248320]"
};

// A parsed GGUF file. Memory-mapped when opened from a path; otherwise views the caller's
// bytes (which must outlive the File).
class File {
 public:
  // Throws gdn::Error naming the file, the key/tensor and the byte offset of any problem.
  static File open(const std::string& path);
  static File parse(std::span<const uint8_t> bytes, const std::string& name);

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const Metadata& meta() const { return meta_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;
  const TensorInfo& tensor(const std::string& name) const;  // throws naming the tensor
  uint64_t file_size() const { return bytes_.size(); }

 private:
  File() = default;
  std::unique_ptr<MappedFile> mapping_;
  std::span<const uint8_t> bytes_;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  Metadata meta_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
};

// Writes a GGUF v3 file. Tensor data is produced on demand by a filler so multi-GB files
// (synthetic Bonsai-27B) never sit in memory whole.
class Writer {
 public:
  using Filler = std::function<void(std::span<uint8_t> out)>;

  Metadata& meta() { return meta_; }
  void add_tensor(const std::string& name, quant::Type type, std::vector<int64_t> ne, Filler fill);
  void add_tensor(const std::string& name, quant::Type type, std::vector<int64_t> ne,
                  std::vector<uint8_t> bytes);
  // Writes to path (atomically: temp file then rename). Throws on I/O errors.
  void write(const std::string& path) const;
  // Whole file in memory, for tests and fuzzing.
  std::vector<uint8_t> to_bytes() const;

 private:
  struct Pending {
    std::string name;
    quant::Type type;
    std::vector<int64_t> ne;
    uint64_t size;
    Filler fill;
  };
  // Where each tensor's data starts in the data section, and the section's size.
  struct Layout {
    std::vector<uint64_t> offsets;
    uint64_t data_bytes = 0;
  };
  Layout layout() const;
  // Everything before the data section, padded to the alignment.
  std::vector<uint8_t> header(const Layout& l) const;

  Metadata meta_;
  std::vector<Pending> tensors_;
};

}  // namespace gdn::gguf
