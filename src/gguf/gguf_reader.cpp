#include <fmt/format.h>

#include <bit>
#include <cstring>

#include "common/error.h"
#include "common/mapped_file.h"
#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"

namespace gdn::gguf {

static_assert(std::endian::native == std::endian::little,
              "GGUF is little-endian; the reader copies scalars as they are");

namespace {

using detail::kMaxArrayDepth;

// Smallest encoding of one value of each type; bounds element counts by the bytes left.
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL:
      return 1;
    case ValueType::UINT16:
    case ValueType::INT16:
      return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32:
      return 4;
    case ValueType::STRING:  // u64 length
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64:
      return 8;
    case ValueType::ARRAY:  // u32 element type + u64 count
      return 12;
  }
  return 1;
}

// Smallest kv pair: empty key, value type, one-byte value.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
// Smallest tensor info: empty name, n_dims, one dimension, type, offset.
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

// Bounds-checked little-endian reader. It also tracks what is being read (key, tensor,
// array element path) so every error names the file, the item and the byte offset.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& file) : bytes_(bytes), file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return bytes_.size(); }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  void set_item(std::string item) {
    item_ = std::move(item);
    path_.clear();
  }
  void enter_array() { path_.push_back(0); }
  void set_index(uint64_t i) { path_.back() = i; }
  void leave_array() { path_.pop_back(); }

  template <typename... Args>
  [[noreturn]] void fail_at(uint64_t offset, fmt::format_string<Args...> f, Args&&... args) const {
    std::string where = item_;
    for (uint64_t i : path_) where += fmt::format("[{}]", i);
    fail("{}: {}: {} (at byte offset {})", file_, where,
         fmt::format(f, std::forward<Args>(args)...), offset);
  }

  template <typename T>
  T read(const char* what) {
    require(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) {
    const uint64_t at = pos_;
    const uint64_t len = read<uint64_t>(what);
    if (len > remaining()) {
      fail_at(at, "{} length {} exceeds the {} bytes left in the file", what, len, remaining());
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  void require(uint64_t n, const char* what) const {
    if (n > remaining()) {
      fail_at(pos_, "file truncated: {} needs {} bytes, {} left", what, n, remaining());
    }
  }

  std::span<const uint8_t> bytes_;
  const std::string& file_;
  uint64_t pos_ = 0;
  std::string item_ = "header";
  std::vector<uint64_t> path_;
};

struct Parsed {
  uint32_t version = 0;
  uint64_t alignment = detail::kDefaultAlignment;
  Metadata meta;
  std::vector<TensorInfo> tensors;
  std::map<std::string, size_t> index;
};

class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, const std::string& file)
      : cur_(bytes, file), base_(bytes.data()) {}

  Parsed run() {
    const auto [n_tensors, n_kv] = read_header();
    for (uint64_t i = 0; i < n_kv; ++i) read_kv(i);
    out_.tensors.reserve(n_tensors);
    offset_fields_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) read_tensor_info(i);
    place_tensors();
    return std::move(out_);
  }

 private:
  std::pair<uint64_t, uint64_t> read_header() {
    const auto magic = cur_.read<uint32_t>("magic");
    if (std::memcmp(&magic, "GGUF", 4) != 0) {
      cur_.fail_at(0, "not a GGUF file: magic is {:02x} (expected 47 47 55 46, \"GGUF\")",
                   fmt::join(std::span(base_, 4), " "));
    }
    const uint64_t version_at = cur_.pos();
    out_.version = cur_.read<uint32_t>("version");
    if (out_.version != 2 && out_.version != detail::kVersion) {
      cur_.fail_at(version_at, "unsupported GGUF version {} (supported: 2, 3)", out_.version);
    }
    const uint64_t n_tensors_at = cur_.pos();
    const auto n_tensors = cur_.read<uint64_t>("tensor count");
    const uint64_t n_kv_at = cur_.pos();
    const auto n_kv = cur_.read<uint64_t>("key/value count");
    // Counts are checked against the bytes they would need so no hostile count can drive
    // a loop or an allocation far beyond the file's size.
    if (n_kv > cur_.remaining() / kMinKvBytes) {
      cur_.fail_at(n_kv_at, "{} key/value pairs cannot fit in the {} bytes left", n_kv,
                   cur_.remaining());
    }
    if (n_tensors > (cur_.remaining() - n_kv * kMinKvBytes) / kMinTensorInfoBytes) {
      cur_.fail_at(n_tensors_at, "{} tensor infos cannot fit in the {} bytes left", n_tensors,
                   cur_.remaining());
    }
    return {n_tensors, n_kv};
  }

  void read_kv(uint64_t i) {
    cur_.set_item(fmt::format("key #{}", i));
    const uint64_t key_at = cur_.pos();
    std::string key = cur_.read_string("key");
    cur_.set_item(fmt::format("key '{}'", key));
    if (out_.meta.has(key)) cur_.fail_at(key_at, "duplicate key");
    const uint64_t value_at = cur_.pos();
    const ValueType type = read_value_type("value type");
    Value v = read_value(type, 0);
    if (key == detail::kAlignmentKey) set_alignment(v, value_at);
    out_.meta.set(key, std::move(v));
  }

  void set_alignment(const Value& v, uint64_t at) {
    if (v.type != ValueType::UINT32) {
      cur_.fail_at(at, "alignment must be uint32, found {}", value_type_name(v.type));
    }
    const uint64_t a = std::get<uint64_t>(v.data);
    if (!detail::is_power_of_two(a)) {
      cur_.fail_at(at, "alignment {} is not a nonzero power of two", a);
    }
    out_.alignment = a;
  }

  ValueType read_value_type(const char* what) {
    const uint64_t at = cur_.pos();
    const auto raw = cur_.read<uint32_t>(what);
    if (raw > static_cast<uint32_t>(ValueType::FLOAT64)) {
      cur_.fail_at(at, "unknown {} {}", what, raw);
    }
    return static_cast<ValueType>(raw);
  }

  Value read_value(ValueType t, int depth) {
    switch (t) {
      case ValueType::UINT8:
        return {t, uint64_t{cur_.read<uint8_t>("uint8")}};
      case ValueType::INT8:
        return {t, int64_t{cur_.read<int8_t>("int8")}};
      case ValueType::UINT16:
        return {t, uint64_t{cur_.read<uint16_t>("uint16")}};
      case ValueType::INT16:
        return {t, int64_t{cur_.read<int16_t>("int16")}};
      case ValueType::UINT32:
        return {t, uint64_t{cur_.read<uint32_t>("uint32")}};
      case ValueType::INT32:
        return {t, int64_t{cur_.read<int32_t>("int32")}};
      case ValueType::UINT64:
        return {t, cur_.read<uint64_t>("uint64")};
      case ValueType::INT64:
        return {t, cur_.read<int64_t>("int64")};
      case ValueType::FLOAT32:
        return {t, double{cur_.read<float>("float32")}};
      case ValueType::FLOAT64:
        return {t, cur_.read<double>("float64")};
      case ValueType::BOOL:
        return {t, read_bool()};
      case ValueType::STRING:
        return {t, cur_.read_string("string")};
      case ValueType::ARRAY:
        return {t, read_array(depth + 1)};
    }
    cur_.fail_at(cur_.pos(), "unknown value type {}", static_cast<uint32_t>(t));
  }

  bool read_bool() {
    const uint64_t at = cur_.pos();
    const auto b = cur_.read<uint8_t>("bool");
    if (b > 1) cur_.fail_at(at, "bool value {} is neither 0 nor 1", b);
    return b == 1;
  }

  Array read_array(int depth) {
    const uint64_t at = cur_.pos();
    if (depth > kMaxArrayDepth) {
      cur_.fail_at(at, "arrays nested more than {} deep", kMaxArrayDepth);
    }
    Array a;
    a.elem = read_value_type("array element type");
    const uint64_t count_at = cur_.pos();
    const auto count = cur_.read<uint64_t>("array count");
    if (count > cur_.remaining() / min_encoded_size(a.elem)) {
      cur_.fail_at(count_at, "array of {} {} values cannot fit in the {} bytes left", count,
                   value_type_name(a.elem), cur_.remaining());
    }
    a.items.reserve(count);
    cur_.enter_array();
    for (uint64_t i = 0; i < count; ++i) {
      cur_.set_index(i);
      a.items.push_back(read_value(a.elem, depth));
    }
    cur_.leave_array();
    return a;
  }

  void read_tensor_info(uint64_t i) {
    cur_.set_item(fmt::format("tensor #{}", i));
    const uint64_t name_at = cur_.pos();
    TensorInfo t;
    t.name = cur_.read_string("tensor name");
    cur_.set_item(fmt::format("tensor '{}'", t.name));
    if (out_.index.count(t.name)) cur_.fail_at(name_at, "duplicate tensor name");

    const uint64_t dims_at = cur_.pos();
    const auto n_dims = cur_.read<uint32_t>("n_dims");
    if (n_dims < 1 || n_dims > detail::kMaxDims) {
      cur_.fail_at(dims_at, "n_dims {} out of range 1..{}", n_dims, detail::kMaxDims);
    }
    const uint64_t ne_at = cur_.pos();
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t at = cur_.pos();
      t.ne.push_back(cur_.read<int64_t>("dimension"));
      if (t.ne.back() < 0) cur_.fail_at(at, "dimension {} is negative ({})", d, t.ne.back());
    }

    const uint64_t type_at = cur_.pos();
    const auto type_id = cur_.read<uint32_t>("ggml type");
    const quant::TypeInfo* info = quant::find_type(type_id);
    if (!info) cur_.fail_at(type_at, "unknown ggml type id {}", type_id);
    t.type = info->type;
    const std::string problem = detail::check_shape(t.type, t.ne, t.size);
    if (!problem.empty()) cur_.fail_at(ne_at, "{}", problem);

    const uint64_t offset_at = cur_.pos();
    t.offset = cur_.read<uint64_t>("data offset");
    if (t.offset % out_.alignment != 0) {
      cur_.fail_at(offset_at, "data offset {} is not a multiple of the alignment {}", t.offset,
                   out_.alignment);
    }
    out_.index.emplace(t.name, out_.tensors.size());
    out_.tensors.push_back(std::move(t));
    offset_fields_.push_back(offset_at);
  }

  // The data section starts at the first aligned position after the tensor infos.
  void place_tensors() {
    if (out_.tensors.empty()) return;
    const uint64_t data_start = detail::align_up(cur_.pos(), out_.alignment);
    if (data_start > cur_.size()) {
      cur_.set_item("tensor data");
      cur_.fail_at(cur_.pos(),
                   "data section would start at {}, past the end of the file ({} bytes)",
                   data_start, cur_.size());
    }
    const uint64_t room = cur_.size() - data_start;
    for (size_t i = 0; i < out_.tensors.size(); ++i) {
      TensorInfo& t = out_.tensors[i];
      if (t.offset > room || t.size > room - t.offset) {
        cur_.set_item(fmt::format("tensor '{}'", t.name));
        cur_.fail_at(offset_fields_[i],
                     "{} bytes of data at offset {} of the data section (which starts at {}) "
                     "extend past the end of the file ({} bytes)",
                     t.size, t.offset, data_start, cur_.size());
      }
      t.data = base_ + data_start + t.offset;
    }
  }

  Cursor cur_;
  const uint8_t* base_;
  Parsed out_;
  std::vector<uint64_t> offset_fields_;
};

}  // namespace

File File::parse(std::span<const uint8_t> bytes, const std::string& name) {
  Parsed p = Parser(bytes, name).run();
  File f;
  f.bytes_ = bytes;
  f.path_ = name;
  f.version_ = p.version;
  f.alignment_ = p.alignment;
  f.meta_ = std::move(p.meta);
  f.tensors_ = std::move(p.tensors);
  f.index_ = std::move(p.index);
  return f;
}

File File::open(const std::string& path) {
  auto mapping = MappedFile::open(path, "GGUF");
  File f = parse(mapping->bytes(), path);
  f.mapping_ = std::move(mapping);
  return f;
}

File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(const std::string& name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) fail("{}: no tensor named '{}'", path_, name);
  return *t;
}

}  // namespace gdn::gguf
