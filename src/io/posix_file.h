// Whole-buffer pread and pwrite on POSIX file descriptors: short transfers are
// continued and EINTR retried, so callers see all-or-error. Used by the
// safetensors reader and writer, which address files by absolute offsets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace colrow {

constexpr int kEndOfFile = -1;

// 0 when all `bytes` were read; kEndOfFile when the file ended first; else errno.
int pread_full(int fd, void* buffer, size_t bytes, uint64_t offset);
// 0 when all `bytes` were written; else errno.
int pwrite_full(int fd, const void* buffer, size_t bytes, uint64_t offset);
// The C library's text for errno `err` ("No such file or directory").
std::string errno_text(int err);

}  // namespace colrow
