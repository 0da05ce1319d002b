// A whole file mapped read-only (GGUF models, safetensors checkpoints): the OS pages weights
// in on demand and several readers share them. Errors name the path and the system's reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace gdn {

class MappedFile {
 public:
  // `kind` names the expected format in the message for an empty file ("GGUF").
  static std::unique_ptr<MappedFile> open(const std::string& path, const char* kind);
  MappedFile(void* addr, size_t len) : addr_(addr), len_(len) {}
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(addr_), len_}; }

 private:
  void* addr_;
  size_t len_;
};

}  // namespace gdn
