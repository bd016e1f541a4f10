// `colrow tokenize`. The ids are written to OUTPUT.tmp.<pid>, flushed to disk,
// then renamed over OUTPUT, so a failure never leaves a partial token file
// (nor damages an existing one).
#include "tokenize.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli.h"
#include "colrow/core/error.h"
#include "colrow/data/text_corpus.h"
#include "colrow/data/token_file.h"
#include "colrow/data/tokenizer.h"

namespace colrow::apps {
namespace {

constexpr int64_t kMaxUint16Ids = int64_t{1} << 16;

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

[[noreturn]] void throw_cannot_write(const std::string& path, int err) {
  throw InvalidInputError("[tokenize] cannot write " + path + ": " + std::strerror(err) +
                          ". Check the directory exists, is writable and has space.");
}

void put_le32(std::vector<unsigned char>& out, uint32_t v) {
  for (int k = 0; k < 4; ++k) out.push_back(static_cast<unsigned char>(v >> (8 * k)));
}

// ids: every id < 2^16 -> `path`, raw or behind llm.c's 256 x int32 header
// (magic, version 1 = uint16 ids, token count).
void write_token_file(const std::string& path, const std::vector<int32_t>& ids, bool llmc) {
  std::vector<unsigned char> bytes;
  bytes.reserve((llmc ? TokenFile::kLlmcHeaderInts * 4 : 0) + ids.size() * 2);
  if (llmc) {
    put_le32(bytes, static_cast<uint32_t>(TokenFile::kLlmcMagic));
    put_le32(bytes, 1);
    put_le32(bytes, static_cast<uint32_t>(ids.size()));
    bytes.resize(TokenFile::kLlmcHeaderInts * 4, 0);
  }
  for (const int32_t id : ids) {
    COLROW_CHECK(id >= 0 && id < kMaxUint16Ids, "token id fits uint16");
    bytes.push_back(static_cast<unsigned char>(id & 0xFF));
    bytes.push_back(static_cast<unsigned char>(id >> 8));
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::unique_ptr<FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
    if (!f) throw_cannot_write(tmp, errno);
    if (std::fwrite(bytes.data(), 1, bytes.size(), f.get()) != bytes.size() ||
        std::fflush(f.get()) != 0 || ::fsync(::fileno(f.get())) != 0) {
      const int err = errno;
      f.reset();
      std::remove(tmp.c_str());
      throw_cannot_write(tmp, err);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw_cannot_write(path, err);
  }
}

}  // namespace

int run_tokenize(const TokenizeOptions& o, const Launch& launch) {
  validate(o);
  const std::filesystem::path output_dir =
      std::filesystem::absolute(o.output).parent_path();  // absolute: "" would mean the cwd
  if (!std::filesystem::is_directory(output_dir)) {
    throw InvalidInputError("[tokenize] output directory (" + output_dir.string() +
                            ") does not exist. Create it, or write --output elsewhere.");
  }
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(o.tokenizer);
  if (tokenizer->vocab_size() > kMaxUint16Ids) {
    throw ConfigError("[tokenize] vocab_size (" + std::to_string(tokenizer->vocab_size()) +
                      ") of the " + tokenizer->name() + " tokenizer in " + o.tokenizer +
                      " must be <= 65536: token files hold uint16 ids.");
  }
  const std::string text = read_text_file(o.input);
  if (launch.world.rank() != 0) return 0;  // the checks above failed on every rank alike

  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tokenizer->encode(text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool llmc = o.format == "llmc";
  if (llmc && ids.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw InvalidInputError("[tokenize] " + o.input + " gives " + std::to_string(ids.size()) +
                            " tokens, more than llm.c's int32 header can count. Use --format "
                            "raw, or split the text.");
  }
  write_token_file(o.output, ids, llmc);

  const double tokens_per_second = seconds > 0 ? static_cast<double>(ids.size()) / seconds : 0.0;
  if (o.json) {
    const nlohmann::json j = {{"tokens", ids.size()},
                              {"bytes", text.size()},
                              {"seconds", seconds},
                              {"tokens_per_second", tokens_per_second},
                              {"tokenizer", tokenizer->name()},
                              {"vocab_size", tokenizer->vocab_size()},
                              {"format", o.format},
                              {"input", o.input},
                              {"output", o.output}};
    std::cout << j.dump() << std::endl;
  } else {
    std::printf(
        "tokenize %s -> %s (%s): %zu tokens from %zu bytes, %s tokenizer (%ld ids), "
        "%.0f tokens/s\n",
        o.input.c_str(), o.output.c_str(), o.format.c_str(), ids.size(), text.size(),
        tokenizer->name().c_str(), static_cast<long>(tokenizer->vocab_size()), tokens_per_second);
  }
  return 0;
}

}  // namespace colrow::apps
