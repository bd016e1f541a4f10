// TextCorpus: a text file, plain or gzip-compressed (recognized by the magic
// bytes 1f 8b, inflated through zlib), tokenized with the byte tokenizer and
// held in memory as a TokenSource. The default corpus is the Jargon File from
// Debian's jargon-text package (public domain), so `colrow train` needs no
// user data. Missing, unreadable, empty or corrupt files are an
// InvalidInputError naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "colrow/data/token_source.h"

namespace colrow {

inline constexpr const char* kDefaultCorpus = "/usr/share/doc/jargon-text/jargon.txt.gz";

// The bytes of `path`, inflated when it is gzip (several gzip members are
// read one after another, as gunzip does).
std::string read_text_file(const std::string& path);

class TextCorpus : public TokenSource {
 public:
  explicit TextCorpus(const std::string& path = kDefaultCorpus);

  const std::string& path() const override { return path_; }
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  void copy(int64_t start, int64_t count, int32_t* out) const override;
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  std::string path_;
  std::vector<int32_t> tokens_;  // byte-tokenizer ids of the whole text
};

}  // namespace colrow
