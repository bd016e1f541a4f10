// TokenFile: a file of token ids, memory-mapped. Two layouts:
//   raw:   little-endian uint16 ids, nothing else;
//   llm.c: a 256 x int32 header (magic 20240520, version, token count), then
//          the ids: uint16 for version 1 (GPT-2), uint32 for version 2.
// The layout is recognized by the magic number. Malformed files are an
// InvalidInputError naming the file and what is wrong.
#pragma once

#include <cstdint>
#include <string>

namespace colrow {

class TokenFile {
 public:
  static constexpr int32_t kLlmcMagic = 20240520;
  static constexpr int64_t kLlmcHeaderInts = 256;

  explicit TokenFile(const std::string& path);

  const std::string& path() const { return path_; }
  int64_t size() const { return count_; }  // number of token ids
  bool has_llmc_header() const { return header_; }
  int64_t token(int64_t index) const;
  // Copies ids [start, start + count) into out (InternalError if out of range).
  void copy(int64_t start, int64_t count, int32_t* out) const;

 private:
  // The read-only mapping, released on destruction (also when the
  // constructor throws after mapping).
  struct Mapping {
    const unsigned char* data = nullptr;
    size_t bytes = 0;
    Mapping() = default;
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping();
  };

  std::string path_;
  Mapping map_;
  const unsigned char* ids_ = nullptr;
  int64_t count_ = 0;
  int bytes_per_id_ = 2;
  bool header_ = false;
};

}  // namespace colrow
