// Fuzzes GPT-2's tokenizer files (src/data/bpe_files.cpp: read_vocab_and_merges)
// and the vocabulary checks of the tokenizer built from them
// (gpt2_tokenizer.cpp). The input is vocab.json, a NUL byte, then merges.txt
// (no NUL: all vocab.json, an empty merges.txt); a NUL cannot occur in valid
// JSON, so every vocab.json is reachable. A tokenizer that loads must keep
// its promises on a fixed text (tokenizer_checks.h).
// Expected for bad input: InvalidInputError naming the file and the entry. A
// finding: a crash, an ASan or UBSan report, any other exception (nlohmann's
// own, InternalError, BackendError), a broken round trip, a hang.
#include <algorithm>
#include <cstdint>

#include "colrow/core/error.h"
#include "colrow/data/gpt2_tokenizer.h"
#include "memory_file.h"
#include "tokenizer_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace colrow;
  static fuzz::MemoryFile vocab("vocab.json");
  static fuzz::MemoryFile merges("merges.txt");
  const uint8_t* nul = std::find(data, data + size, uint8_t{0});
  vocab.assign(data, static_cast<size_t>(nul - data));
  merges.assign(nul + (nul < data + size ? 1 : 0),
                static_cast<size_t>(data + size - nul) - (nul < data + size ? 1 : 0));
  try {
    const auto tokenizer = Gpt2Tokenizer::from_vocab_and_merges(vocab.path(), merges.path());
    fuzz::require_round_trip(*tokenizer, fuzz::sample_text());
  } catch (const InvalidInputError&) {
  }
  return 0;
}
