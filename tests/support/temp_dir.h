// Temporary directories for tests: TempDir, a fresh directory of this process
// removed with everything in it when the test ends; shared_temp_dir, a name
// every rank of a group agrees on, for files the ranks write together.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "colrow/core/tensor.h"
#include "colrow/dist/communicator.h"

namespace colrow::testing {

class TempDir {
 public:
  // /tmp/colrow_<tag>_XXXXXX, created now.
  explicit TempDir(const std::string& tag) {
    std::string pattern = "/tmp/colrow_" + tag + "_XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (mkdtemp(buffer.data()) == nullptr) {
      throw std::runtime_error("cannot create a temporary directory " + pattern);
    }
    path_ = buffer.data();
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// /tmp/colrow_<tag>_<rank 0's pid>, the same on every rank of `group`
// (collective: a broadcast). Not created; the caller removes what it writes.
inline std::string shared_temp_dir(Communicator& group, const std::string& tag) {
  Tensor pid = Tensor::full({1}, static_cast<float>(getpid() % (1 << 22)));  // < 2^24: exact
  group.broadcast(pid, 0);
  return "/tmp/colrow_" + tag + "_" + std::to_string(static_cast<int>(pid.data()[0]));
}

}  // namespace colrow::testing
