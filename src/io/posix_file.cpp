// Whole-buffer pread/pwrite loops (posix_file.h).
#include "io/posix_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace colrow {
namespace {
// Linux transfers at most 0x7ffff000 bytes per call; stay well below.
constexpr size_t kMaxTransfer = size_t{1} << 30;
}  // namespace

int pread_full(int fd, void* buffer, size_t bytes, uint64_t offset) {
  char* p = static_cast<char*>(buffer);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, std::min(bytes, kMaxTransfer), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return kEndOfFile;
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return 0;
}

int pwrite_full(int fd, const void* buffer, size_t bytes, uint64_t offset) {
  const char* p = static_cast<const char*>(buffer);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, std::min(bytes, kMaxTransfer), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;  // no progress and no error: do not spin
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return 0;
}

std::string errno_text(int err) {
  return std::strerror(err);
}

}  // namespace colrow
