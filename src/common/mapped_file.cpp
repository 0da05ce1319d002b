#include "common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace gdn {
namespace {

struct UniqueFd {
  int fd;
  explicit UniqueFd(int f) : fd(f) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void fail_errno(const std::string& path, const char* what, int err) {
  fail("{}: {}: {}", path, what, std::strerror(err));
}

}  // namespace

std::unique_ptr<MappedFile> MappedFile::open(const std::string& path, const char* kind) {
  const UniqueFd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) fail_errno(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) fail_errno(path, "cannot stat", errno);
  if (S_ISDIR(st.st_mode)) fail_errno(path, "cannot map", EISDIR);
  if (!S_ISREG(st.st_mode)) fail_errno(path, "cannot map", ENODEV);
  if (st.st_size == 0) fail("{}: empty file (0 bytes), not a {} file", path, kind);
  const auto len = static_cast<size_t>(st.st_size);
  // The mapping keeps the file's pages alive after the descriptor closes.
  void* addr = ::mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (addr == MAP_FAILED) fail_errno(path, "cannot mmap", errno);
  return std::make_unique<MappedFile>(addr, len);
}

MappedFile::~MappedFile() {
  ::munmap(addr_, len_);
}

}  // namespace gdn
