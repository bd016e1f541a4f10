// TokenSource: a read-only sequence of token ids that TokenDataset samples
// from, whatever its origin: a token file (TokenFileSource, memory-mapped) or
// a text file tokenized in memory (TextCorpus, text_corpus.h).
// open_token_source picks by the file: llm.c's magic or a ".bin" name is a
// token file, anything else is text (plain or gzip).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "colrow/data/token_file.h"

namespace colrow {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // The file the tokens came from: named in every data error.
  virtual const std::string& path() const = 0;
  virtual int64_t size() const = 0;  // number of token ids
  // Copies ids [start, start + count) into out (InternalError if out of range).
  virtual void copy(int64_t start, int64_t count, int32_t* out) const = 0;
};

class TokenFileSource : public TokenSource {
 public:
  explicit TokenFileSource(const std::string& path) : file_(path) {}
  const std::string& path() const override { return file_.path(); }
  int64_t size() const override { return file_.size(); }
  void copy(int64_t start, int64_t count, int32_t* out) const override {
    file_.copy(start, count, out);
  }

 private:
  TokenFile file_;
};

// A token file (TokenFileSource) when `path` ends in ".bin" or starts with
// llm.c's magic; otherwise a text file read through the byte tokenizer.
std::unique_ptr<TokenSource> open_token_source(const std::string& path);

}  // namespace colrow
