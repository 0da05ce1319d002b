// Read-only safetensors access: one memory-mapped file, or a checkpoint directory
// (model.safetensors.index.json with its shards, or a single model.safetensors).
//
// File layout: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [...], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"key": "value"}}, then the data; offsets are relative to the data.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/mapped_file.h"

namespace gdn::convert {

// The only element types a Qwen3.5 checkpoint needs; anything else is refused by name.
enum class StDtype { F32, F16, BF16 };
const char* st_dtype_name(StDtype t);
size_t st_dtype_size(StDtype t);

struct StTensor {
  std::string name;
  std::string file;  // for messages
  StDtype dtype = StDtype::F32;
  std::vector<int64_t> shape;     // row-major, outermost first (PyTorch order)
  std::span<const uint8_t> data;  // n_elements() * st_dtype_size(dtype) bytes

  int64_t n_elements() const;
  std::string shape_str() const;  // "[248320, 5120]"
  // Widens elements [first, first + n) to f32.
  void read_f32(int64_t first, int64_t n, float* out) const;
};

// One parsed, memory-mapped safetensors file. Every header field and offset is checked; errors
// name the file, the tensor and the offending values.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::vector<StTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;

  std::unique_ptr<MappedFile> mapping_;
  std::string path_;
  std::vector<StTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of an HF checkpoint directory, by name.
class Checkpoint {
 public:
  // Uses model.safetensors.index.json when present (every weight_map entry must be found in
  // the shard it names, and every shard tensor must be listed), else model.safetensors.
  static Checkpoint open(const std::string& dir);

  const StTensor* find(const std::string& name) const;
  const std::map<std::string, const StTensor*>& tensors() const { return by_name_; }

 private:
  std::vector<SafetensorsFile> files_;
  std::map<std::string, const StTensor*> by_name_;
};

}  // namespace gdn::convert
