// load_tokenizer: which tokenizer a directory's files describe.
#include "colrow/data/tokenizer.h"

#include <filesystem>

#include "colrow/core/error.h"
#include "colrow/data/byte_tokenizer.h"
#include "colrow/data/gpt2_tokenizer.h"

namespace colrow {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    throw InvalidInputError("[tokenizer] directory (" + dir + ") " +
                            (fs::exists(dir, error) ? "is a file" : "does not exist") +
                            ". Pass a directory holding tokenizer.json or vocab.json + merges.txt "
                            "(an empty one means the byte tokenizer).");
  }
  const fs::path base(dir);
  // Hugging Face's loaders prefer tokenizer.json too.
  if (fs::exists(base / "tokenizer.json", error)) {
    return Gpt2Tokenizer::from_tokenizer_json((base / "tokenizer.json").string());
  }
  const bool has_vocab = fs::exists(base / "vocab.json", error);
  const bool has_merges = fs::exists(base / "merges.txt", error);
  if (has_vocab && has_merges) {
    return Gpt2Tokenizer::from_vocab_and_merges((base / "vocab.json").string(),
                                                (base / "merges.txt").string());
  }
  if (has_vocab || has_merges) {
    throw InvalidInputError("[tokenizer] " + dir + " has " +
                            (has_vocab ? "vocab.json but no merges.txt"
                                       : "merges.txt but no "
                                         "vocab.json") +
                            "; a BPE tokenizer needs both. Add the missing file, or remove the "
                            "other to use the byte tokenizer.");
  }
  return std::make_unique<ByteTokenizer>();
}

}  // namespace colrow
