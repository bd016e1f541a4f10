// Fuzzes Hugging Face's tokenizer.json reader (src/data/bpe_files.cpp:
// read_tokenizer_json: the model, pre-tokenizer, normalizer, decoder and
// post-processor checks, model.vocab, model.merges in both spellings,
// added_tokens) and the tokenizer built from it (gpt2_tokenizer.cpp). The
// input is the file. A tokenizer that loads must keep its promises on a
// fixed text (tokenizer_checks.h).
// Expected for bad input: InvalidInputError naming the file and the field. A
// finding: a crash, an ASan or UBSan report, any other exception (nlohmann's
// own, InternalError, BackendError), a broken round trip, a hang.
#include <cstdint>

#include "colrow/core/error.h"
#include "colrow/data/gpt2_tokenizer.h"
#include "memory_file.h"
#include "tokenizer_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace colrow;
  static fuzz::MemoryFile file("tokenizer.json");
  file.assign(data, size);
  try {
    const auto tokenizer = Gpt2Tokenizer::from_tokenizer_json(file.path());
    fuzz::require_round_trip(*tokenizer, fuzz::sample_text());
  } catch (const InvalidInputError&) {
  }
  return 0;
}
