#include "convert/safetensors.h"

#include <fmt/ranges.h>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "convert/json_file.h"
#include "quant/quant.h"

namespace gdn::convert {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A header larger than this is not a real checkpoint (HF's own reader caps it at 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

StDtype parse_dtype(const std::string& s, const std::string& file, const std::string& tensor) {
  if (s == "F32") return StDtype::F32;
  if (s == "F16") return StDtype::F16;
  if (s == "BF16") return StDtype::BF16;
  fail("{}: tensor '{}' has dtype '{}'; only F32, F16 and BF16 are supported", file, tensor, s);
}

uint64_t json_u64(const json& v, const std::string& file, const std::string& tensor,
                  const char* what) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
    fail("{}: tensor '{}': {} must be a non-negative integer, got {}", file, tensor, what,
         v.dump());
  }
  return v.get<uint64_t>();
}

json parse_header(std::span<const uint8_t> bytes, const std::string& path, uint64_t& data_start) {
  if (bytes.size() < 8)
    fail("{}: {} bytes, too short for a safetensors header", path, bytes.size());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];
  if (n > kMaxHeaderBytes || n > bytes.size() - 8) {
    fail("{}: header length {} exceeds the file ({} bytes) or the {} byte limit", path, n,
         bytes.size(), kMaxHeaderBytes);
  }
  data_start = 8 + n;
  const auto* text = reinterpret_cast<const char*>(bytes.data() + 8);
  json header = json::parse(text, text + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    fail("{}: header ({} bytes at offset 8) is not a JSON object", path, n);
  }
  return header;
}

StTensor parse_tensor(const std::string& name, const json& entry, std::span<const uint8_t> data,
                      const std::string& path) {
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets")) {
    fail("{}: tensor '{}' needs dtype, shape and data_offsets, got {}", path, name, entry.dump());
  }
  if (!entry["dtype"].is_string()) fail("{}: tensor '{}': dtype is not a string", path, name);
  StTensor t;
  t.name = name;
  t.file = path;
  t.dtype = parse_dtype(entry["dtype"].get<std::string>(), path, name);

  const json& shape = entry["shape"];
  if (!shape.is_array()) fail("{}: tensor '{}': shape is not an array", path, name);
  // Shapes are int64 from here on (n_elements() multiplies them in order), so the product of the
  // non-zero dimensions must fit one even when a zero dimension makes the tensor empty.
  uint64_t count = 1, nonzero = 1;
  for (const json& d : shape) {
    const uint64_t dim = json_u64(d, path, name, "shape entry");
    if (dim != 0 && nonzero > uint64_t(std::numeric_limits<int64_t>::max()) / dim) {
      fail("{}: tensor '{}': element count of shape {} overflows", path, name, shape.dump());
    }
    nonzero *= dim != 0 ? dim : 1;
    count *= dim;
    t.shape.push_back(static_cast<int64_t>(dim));
  }

  const json& offs = entry["data_offsets"];
  if (!offs.is_array() || offs.size() != 2) {
    fail("{}: tensor '{}': data_offsets must be [begin, end], got {}", path, name, offs.dump());
  }
  const uint64_t begin = json_u64(offs[0], path, name, "data_offsets[0]");
  const uint64_t end = json_u64(offs[1], path, name, "data_offsets[1]");
  if (begin > end || end > data.size()) {
    fail("{}: tensor '{}': data_offsets [{}, {}] outside the data section of {} bytes", path, name,
         begin, end, data.size());
  }
  const uint64_t elem = st_dtype_size(t.dtype);
  if (count > std::numeric_limits<uint64_t>::max() / elem || count * elem != end - begin) {
    fail("{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets [{}, {}] span {}", path,
         name, t.shape_str(), st_dtype_name(t.dtype), count * elem, begin, end, end - begin);
  }
  t.data = data.subspan(begin, end - begin);
  return t;
}

std::map<std::string, std::string> parse_metadata(const json& meta, const std::string& path) {
  if (!meta.is_object()) fail("{}: __metadata__ is not an object", path);
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : meta.items()) {
    if (!value.is_string()) fail("{}: __metadata__ entry '{}' is not a string", path, key);
    out[key] = value.get<std::string>();
  }
  return out;
}

}  // namespace

const char* st_dtype_name(StDtype t) {
  switch (t) {
    case StDtype::F32:
      return "F32";
    case StDtype::F16:
      return "F16";
    case StDtype::BF16:
      return "BF16";
  }
  return "?";
}

size_t st_dtype_size(StDtype t) {
  return t == StDtype::F32 ? 4 : 2;
}

int64_t StTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string StTensor::shape_str() const {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

void StTensor::read_f32(int64_t first, int64_t n, float* out) const {
  if (first < 0 || n < 0 || first + n > n_elements()) {
    fail("{}: tensor '{}': read of elements [{}, {}) outside its {} elements", file, name, first,
         first + n, n_elements());
  }
  const uint8_t* src = data.data() + static_cast<size_t>(first) * st_dtype_size(dtype);
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case StDtype::F32:
        std::memcpy(&out[i], src + 4 * i, 4);
        break;
      case StDtype::F16:
      case StDtype::BF16: {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = dtype == StDtype::F16 ? quant::fp16_to_f32(h) : quant::bf16_to_f32(h);
        break;
      }
    }
  }
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.mapping_ = MappedFile::open(path, "safetensors");
  const auto bytes = f.mapping_->bytes();
  uint64_t data_start = 0;
  const json header = parse_header(bytes, path, data_start);
  const auto data = bytes.subspan(data_start);
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      f.metadata_ = parse_metadata(entry, path);
    } else {
      f.tensors_.push_back(parse_tensor(name, entry, data, path));
    }
  }
  return f;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

Checkpoint Checkpoint::open(const std::string& dir) {
  const fs::path root(dir);
  const fs::path index_path = root / "model.safetensors.index.json";
  const fs::path single_path = root / "model.safetensors";

  // weight_map: tensor -> shard; empty for a single-file checkpoint.
  std::map<std::string, std::string> weight_map;
  std::set<std::string> shards;
  if (fs::exists(index_path)) {
    const json index = read_json_file(index_path.string());
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      fail("{}: no weight_map object", index_path.string());
    }
    for (const auto& [name, shard] : index["weight_map"].items()) {
      if (!shard.is_string())
        fail("{}: weight_map['{}'] is not a string", index_path.string(), name);
      weight_map[name] = shard.get<std::string>();
      shards.insert(shard.get<std::string>());
    }
  } else if (fs::exists(single_path)) {
    shards.insert("model.safetensors");
  } else {
    fail("{}: neither model.safetensors.index.json nor model.safetensors found", dir);
  }

  Checkpoint ck;
  ck.files_.reserve(shards.size());
  for (const std::string& shard : shards) {
    if (shard.find('/') != std::string::npos || shard == "..") {
      fail("{}: shard name '{}' is not a plain file name", index_path.string(), shard);
    }
    ck.files_.push_back(SafetensorsFile::open((root / shard).string()));
  }
  // Pointers into files_[i].tensors() stay valid: files_ is not resized after this point.
  for (const SafetensorsFile& f : ck.files_) {
    const std::string shard = fs::path(f.path()).filename().string();
    for (const StTensor& t : f.tensors()) {
      if (!weight_map.empty()) {
        auto it = weight_map.find(t.name);
        if (it == weight_map.end() || it->second != shard) {
          fail("{}: tensor '{}' is not listed for this shard in {}", f.path(), t.name,
               index_path.string());
        }
      }
      if (!ck.by_name_.emplace(t.name, &t).second) {
        fail("{}: tensor '{}' appears twice in the checkpoint", f.path(), t.name);
      }
    }
  }
  for (const auto& [name, shard] : weight_map) {
    if (!ck.by_name_.contains(name)) {
      fail("{}: tensor '{}' is listed in weight_map but missing from {}", index_path.string(), name,
           shard);
    }
  }
  return ck;
}

const StTensor* Checkpoint::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

}  // namespace gdn::convert
