// Token files, raw or with llm.c's header, read through mmap.
#include "colrow/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "colrow/core/error.h"

namespace colrow {
namespace {

// Little-endian loads: the files are little-endian whatever the host.
uint32_t load_u16(const unsigned char* p) {
  return p[0] | (p[1] << 8);
}
uint32_t load_u32(const unsigned char* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace

TokenFile::TokenFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    throw InvalidInputError("[data] cannot open token file " + path + ": " + std::strerror(errno) +
                            ".");
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InvalidInputError("[data] token file " + path + " is not a regular file.");
  }
  map_.bytes = static_cast<size_t>(st.st_size);
  if (map_.bytes == 0) {
    ::close(fd);
    throw InvalidInputError("[data] token file " + path + " is empty.");
  }
  void* m = ::mmap(nullptr, map_.bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) {
    throw InvalidInputError("[data] cannot map token file " + path + ": " + std::strerror(errno) +
                            ".");
  }
  map_.data = static_cast<const unsigned char*>(m);

  const int64_t header_bytes = kLlmcHeaderInts * 4;
  header_ = map_.bytes >= 4 && static_cast<int32_t>(load_u32(map_.data)) == kLlmcMagic;
  if (!header_) {
    if (map_.bytes % 2 != 0) {
      throw InvalidInputError("[data] token file " + path + " has " + std::to_string(map_.bytes) +
                              " bytes; raw uint16 ids need an even count. Is it truncated?");
    }
    ids_ = map_.data;
    count_ = static_cast<int64_t>(map_.bytes / 2);
    return;
  }
  if (static_cast<int64_t>(map_.bytes) < header_bytes) {
    throw InvalidInputError("[data] token file " + path + " starts with llm.c's magic but is " +
                            "shorter than its 1024-byte header.");
  }
  const uint32_t version = load_u32(map_.data + 4);
  if (version != 1 && version != 2) {
    throw InvalidInputError("[data] token file " + path + ": llm.c header version (" +
                            std::to_string(version) + ") must be 1 (uint16 ids) or 2 (uint32).");
  }
  bytes_per_id_ = version == 1 ? 2 : 4;
  count_ = static_cast<int64_t>(load_u32(map_.data + 8));
  const int64_t expected = header_bytes + count_ * bytes_per_id_;
  if (expected != static_cast<int64_t>(map_.bytes)) {
    const int64_t bytes = static_cast<int64_t>(map_.bytes);
    throw InvalidInputError("[data] token file " + path + ": its header says " +
                            std::to_string(count_) + " tokens (" + std::to_string(expected) +
                            " bytes) but the file has " + std::to_string(bytes) + " bytes.");
  }
  if (count_ == 0) {
    throw InvalidInputError("[data] token file " + path + " holds no tokens.");
  }
  ids_ = map_.data + header_bytes;
}

TokenFile::Mapping::~Mapping() {
  if (data != nullptr) ::munmap(const_cast<unsigned char*>(data), bytes);
}

int64_t TokenFile::token(int64_t index) const {
  if (index < 0 || index >= count_) {
    throw InternalError("[data] token index " + std::to_string(index) + " outside " + path_ + " (" +
                        std::to_string(count_) + " tokens)");
  }
  const unsigned char* p = ids_ + index * bytes_per_id_;
  return bytes_per_id_ == 2 ? load_u16(p) : load_u32(p);
}

void TokenFile::copy(int64_t start, int64_t count, int32_t* out) const {
  if (start < 0 || count < 0 || start + count > count_) {
    throw InternalError("[data] tokens [" + std::to_string(start) + ", " +
                        std::to_string(start + count) + ") outside " + path_ + " (" +
                        std::to_string(count_) + " tokens)");
  }
  for (int64_t i = 0; i < count; ++i) {
    const unsigned char* p = ids_ + (start + i) * bytes_per_id_;
    out[i] = static_cast<int32_t>(bytes_per_id_ == 2 ? load_u16(p) : load_u32(p));
  }
}

}  // namespace colrow
