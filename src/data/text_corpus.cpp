// Text files, plain or gzip (zlib's gz* API), tokenized byte by byte.
#include "colrow/data/text_corpus.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/data/byte_tokenizer.h"

namespace colrow {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;

[[noreturn]] void throw_cannot_open(const std::string& path, int err) {
  if (err == ENOENT && path == kDefaultCorpus) {
    throw InvalidInputError(
        std::string("[data] the default corpus ") + kDefaultCorpus +
        " is missing. Install it with `apt-get install jargon-text` (scripts/install-deps.sh "
        "does), or pass a text or token file with --data PATH. If jargon-text is installed and "
        "the file is still missing, the image excludes /usr/share/doc through a dpkg "
        "path-exclude rule (see /etc/dpkg/dpkg.cfg.d/): remove that rule and run "
        "`apt-get install --reinstall jargon-text`.");
  }
  throw InvalidInputError("[data] cannot open text file " + path + ": " + std::strerror(err) + ".");
}

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

std::string read_plain(const std::string& path) {
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) throw_cannot_open(path, errno);
  std::string text;
  std::vector<char> chunk(kChunkBytes);
  size_t got = 0;
  while ((got = std::fread(chunk.data(), 1, chunk.size(), f.get())) > 0) {
    text.append(chunk.data(), got);
  }
  if (std::ferror(f.get())) {
    throw InvalidInputError("[data] cannot read text file " + path + ": " + std::strerror(errno) +
                            ".");
  }
  return text;
}

std::string read_gzip(const std::string& path) {
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) throw_cannot_open(path, errno);
  std::string text;
  std::vector<char> chunk(kChunkBytes);
  int got = 0;
  while ((got = gzread(gz, chunk.data(), static_cast<unsigned>(chunk.size()))) > 0) {
    text.append(chunk.data(), static_cast<size_t>(got));
  }
  // gzread returns -1 on a corrupt stream, and 0 with Z_BUF_ERROR on a
  // truncated one: check the error state either way.
  int err = Z_OK;
  const char* message = gzerror(gz, &err);
  const std::string what = message != nullptr ? message : "unknown zlib error";
  gzclose(gz);
  if (got < 0 || err != Z_OK) {
    throw InvalidInputError("[data] text file " + path +
                            " starts like gzip (bytes 1f 8b) but does not inflate: " + what +
                            ". Check it with `gzip -t " + path + "` and fetch it again.");
  }
  return text;
}

}  // namespace

std::string read_text_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw_cannot_open(path, errno);
  if (!S_ISREG(st.st_mode)) {
    throw InvalidInputError("[data] text file " + path + " is not a regular file.");
  }
  if (st.st_size == 0) throw InvalidInputError("[data] text file " + path + " is empty.");

  unsigned char magic[2] = {0, 0};
  {
    std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
    if (!f) throw_cannot_open(path, errno);
    const size_t got = std::fread(magic, 1, 2, f.get());
    if (got < 2) magic[0] = 0;
  }
  const bool gzip = magic[0] == 0x1f && magic[1] == 0x8b;
  std::string text = gzip ? read_gzip(path) : read_plain(path);
  if (text.empty()) {
    throw InvalidInputError("[data] text file " + path + " is empty" +
                            (gzip ? " once inflated." : "."));
  }
  return text;
}

TextCorpus::TextCorpus(const std::string& path)
    : path_(path), tokens_(ByteTokenizer().encode(read_text_file(path))) {}

void TextCorpus::copy(int64_t start, int64_t count, int32_t* out) const {
  if (start < 0 || count < 0 || start + count > size()) {
    throw InternalError("[data] tokens [" + std::to_string(start) + ", " +
                        std::to_string(start + count) + ") outside " + path_ + " (" +
                        std::to_string(size()) + " tokens)");
  }
  std::copy(tokens_.begin() + start, tokens_.begin() + start + count, out);
}

}  // namespace colrow
