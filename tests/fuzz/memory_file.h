// MemoryFile: the fuzzer's bytes as a file, for readers that take only a path
// (the safetensors reader, token files, vocab.json / merges.txt). An anonymous
// memfd reached through /proc/self/fd/N: nothing touches the disk and nothing
// is left behind, however the run ends. Rewritten in place for every input.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace colrow::fuzz {

class MemoryFile {
 public:
  explicit MemoryFile(const char* name) {
    fd_ = ::memfd_create(name, MFD_CLOEXEC);
    if (fd_ < 0) {
      std::perror("[fuzz] memfd_create");
      std::abort();  // the harness, not the input: stop the run
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  const std::string& path() const { return path_; }

  // The file becomes exactly these bytes.
  void assign(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) fail("ftruncate");
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) fail("pwrite");
      done += static_cast<size_t>(n);
    }
  }

 private:
  [[noreturn]] static void fail(const char* what) {
    std::perror(what);
    std::abort();
  }

  int fd_ = -1;
  std::string path_;
};

}  // namespace colrow::fuzz
