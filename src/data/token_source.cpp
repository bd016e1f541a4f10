// Choosing between a token file and a text file for a data path.
#include "colrow/data/token_source.h"

#include <cstdio>

#include "colrow/data/text_corpus.h"

namespace colrow {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// True when the file's first four bytes are llm.c's magic (little-endian).
bool has_llmc_magic(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;  // the reader below reports why
  unsigned char b[4] = {0, 0, 0, 0};
  const size_t got = std::fread(b, 1, 4, f);
  std::fclose(f);
  const uint32_t magic = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  return got == 4 && static_cast<int32_t>(magic) == TokenFile::kLlmcMagic;
}

}  // namespace

std::unique_ptr<TokenSource> open_token_source(const std::string& path) {
  if (ends_with(path, ".bin") || has_llmc_magic(path)) {
    return std::make_unique<TokenFileSource>(path);
  }
  return std::make_unique<TextCorpus>(path);
}

}  // namespace colrow
