#include <fcntl.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"

namespace gdn::gguf {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF is little-endian; the writer copies scalars as they are");

// Little-endian append-only buffer for the header, metadata and tensor infos.
class ByteSink {
 public:
  template <typename T>
  void put(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) { bytes_.resize(detail::align_up(bytes_.size(), alignment)); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// The value's stored integer, checked to fit the declared width so that the file says
// exactly what the caller meant.
template <typename T>
T integer_as(const std::string& label, const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.data); u && std::in_range<T>(*u)) return T(*u);
  if (const auto* s = std::get_if<int64_t>(&v.data); s && std::in_range<T>(*s)) return T(*s);
  fail("metadata key '{}': {} value is missing or out of range", label, value_type_name(v.type));
}

template <typename T>
const T& payload(const std::string& label, const Value& v) {
  const T* p = std::get_if<T>(&v.data);
  if (!p) {
    fail("metadata key '{}': {} value holds the wrong kind of data", label,
         value_type_name(v.type));
  }
  return *p;
}

void put_value(ByteSink& out, const std::string& label, const Value& v, int depth);

void put_array(ByteSink& out, const std::string& label, const Array& a, int depth) {
  if (depth > detail::kMaxArrayDepth) {
    fail("metadata key '{}': arrays nested more than {} deep", label, detail::kMaxArrayDepth);
  }
  out.put(static_cast<uint32_t>(a.elem));
  out.put<uint64_t>(a.items.size());
  for (size_t i = 0; i < a.items.size(); ++i) {
    const std::string item_label = fmt::format("{}[{}]", label, i);
    if (a.items[i].type != a.elem) {
      fail("metadata key '{}': element of type {} in an array of {}", item_label,
           value_type_name(a.items[i].type), value_type_name(a.elem));
    }
    put_value(out, item_label, a.items[i], depth);
  }
}

void put_value(ByteSink& out, const std::string& label, const Value& v, int depth) {
  switch (v.type) {
    case ValueType::UINT8:
      return out.put(integer_as<uint8_t>(label, v));
    case ValueType::INT8:
      return out.put(integer_as<int8_t>(label, v));
    case ValueType::UINT16:
      return out.put(integer_as<uint16_t>(label, v));
    case ValueType::INT16:
      return out.put(integer_as<int16_t>(label, v));
    case ValueType::UINT32:
      return out.put(integer_as<uint32_t>(label, v));
    case ValueType::INT32:
      return out.put(integer_as<int32_t>(label, v));
    case ValueType::UINT64:
      return out.put(integer_as<uint64_t>(label, v));
    case ValueType::INT64:
      return out.put(integer_as<int64_t>(label, v));
    case ValueType::FLOAT32:
      return out.put(static_cast<float>(payload<double>(label, v)));
    case ValueType::FLOAT64:
      return out.put(payload<double>(label, v));
    case ValueType::BOOL:
      return out.put<uint8_t>(payload<bool>(label, v) ? 1 : 0);
    case ValueType::STRING:
      return out.put_string(payload<std::string>(label, v));
    case ValueType::ARRAY:
      return put_array(out, label, payload<Array>(label, v), depth + 1);
  }
  fail("metadata key '{}': unknown value type {}", label, static_cast<uint32_t>(v.type));
}

uint64_t alignment_of(const Metadata& meta) {
  const Value* v = meta.find(detail::kAlignmentKey);
  if (!v) return detail::kDefaultAlignment;
  if (v->type != ValueType::UINT32) {
    fail("metadata key '{}': must be uint32, found {}", detail::kAlignmentKey,
         value_type_name(v->type));
  }
  const uint64_t a = integer_as<uint32_t>(detail::kAlignmentKey, *v);
  if (!detail::is_power_of_two(a)) {
    fail("metadata key '{}': {} is not a nonzero power of two", detail::kAlignmentKey, a);
  }
  return a;
}

void write_all(int fd, std::span<const uint8_t> chunk, const std::string& path) {
  while (!chunk.empty()) {
    const ssize_t n = ::write(fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("{}: write failed: {}", path, std::strerror(errno));
    chunk = chunk.subspan(static_cast<size_t>(n));
  }
}

}  // namespace

void Writer::add_tensor(const std::string& name, quant::Type type, std::vector<int64_t> ne,
                        Filler fill) {
  const bool duplicate = std::any_of(tensors_.begin(), tensors_.end(),
                                     [&](const Pending& p) { return p.name == name; });
  if (duplicate) fail("tensor '{}': added twice", name);
  uint64_t size = 0;
  const std::string problem = detail::check_shape(type, ne, size);
  if (!problem.empty()) fail("tensor '{}': {}", name, problem);
  tensors_.push_back({name, type, std::move(ne), size, std::move(fill)});
}

void Writer::add_tensor(const std::string& name, quant::Type type, std::vector<int64_t> ne,
                        std::vector<uint8_t> bytes) {
  uint64_t size = 0;
  if (detail::check_shape(type, ne, size).empty() && size != bytes.size()) {
    fail("tensor '{}': {} bytes given, its shape {} needs {}", name, bytes.size(),
         fmt::join(ne, "x"), size);
  }
  add_tensor(name, type, std::move(ne), [b = std::move(bytes)](std::span<uint8_t> out) {
    std::copy(b.begin(), b.end(), out.begin());
  });
}

Writer::Layout Writer::layout() const {
  const uint64_t alignment = alignment_of(meta_);
  Layout l;
  for (const Pending& t : tensors_) {
    if (l.data_bytes > UINT64_MAX - alignment || t.size > UINT64_MAX - alignment - l.data_bytes) {
      fail("tensor '{}': data section overflows 64-bit offsets", t.name);
    }
    l.offsets.push_back(l.data_bytes);
    l.data_bytes = detail::align_up(l.data_bytes + t.size, alignment);
  }
  if (!tensors_.empty()) l.data_bytes = l.offsets.back() + tensors_.back().size;  // no tail pad
  return l;
}

std::vector<uint8_t> Writer::header(const Layout& l) const {
  ByteSink head;
  head.put<uint32_t>(0x46554747);  // "GGUF"
  head.put<uint32_t>(detail::kVersion);
  head.put<uint64_t>(tensors_.size());
  head.put<uint64_t>(meta_.all().size());
  for (const auto& [key, value] : meta_.all()) {
    head.put_string(key);
    head.put(static_cast<uint32_t>(value.type));
    put_value(head, key, value, 0);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    head.put_string(tensors_[i].name);
    head.put<uint32_t>(static_cast<uint32_t>(tensors_[i].ne.size()));
    for (int64_t d : tensors_[i].ne) head.put(d);
    head.put(static_cast<uint32_t>(tensors_[i].type));
    head.put(l.offsets[i]);
  }
  head.pad_to(alignment_of(meta_));
  return head.bytes();
}

// The whole file is allocated once and every tensor filled in place: the fuzz tests build
// hundreds of files, and growing the vector chunk by chunk was most of their time under ASan.
std::vector<uint8_t> Writer::to_bytes() const {
  const Layout l = layout();
  std::vector<uint8_t> file = header(l);
  const size_t data_start = file.size();
  file.resize(data_start + l.data_bytes);  // zeros: the padding between tensors
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].fill) {
      tensors_[i].fill({file.data() + data_start + l.offsets[i], tensors_[i].size});
    }
  }
  return file;
}

void Writer::write(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", tmp, std::strerror(errno));
  try {
    const Layout l = layout();
    write_all(fd, header(l), tmp);
    // One tensor in memory at a time: multi-GB files never sit in memory whole.
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (i > 0) {
        const uint64_t prev_end = l.offsets[i - 1] + tensors_[i - 1].size;
        write_all(fd, std::vector<uint8_t>(l.offsets[i] - prev_end, 0), tmp);
      }
      std::vector<uint8_t> data(tensors_[i].size);
      if (tensors_[i].fill) tensors_[i].fill(data);
      write_all(fd, data, tmp);
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("{}: close failed: {}", tmp, std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("{}: cannot rename to '{}': {}", tmp, path, std::strerror(err));
  }
}

}  // namespace gdn::gguf
