// Fuzzes the token file readers (src/data/token_file.cpp, token_source.cpp,
// text_corpus.cpp) and the dataset over them (token_dataset.cpp): the input
// is a whole file, opened as a token file (what a ".bin" path gets: raw
// uint16 ids, or llm.c's 1024-byte header with uint16 or uint32 ids) and
// through open_token_source under another name (llm.c's magic: a token file;
// else text, plain or gzip, byte-tokenized). Each source then goes through
// what train and eval do with it: the id check, the unigram baseline, train
// batches and validation windows.
// Expected for bad input: InvalidInputError (malformed, empty, shorter than
// a window, an id past the vocabulary). A finding: a crash, an ASan or UBSan report, any
// other exception (InternalError is a bug by definition), ids that disagree
// between token() and copy(), a target that is not the next id, a hang, or
// an allocation past libFuzzer's -malloc_limit_mb (a gzip bomb included).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/data/token_dataset.h"
#include "colrow/data/token_file.h"
#include "colrow/data/token_source.h"
#include "finding.h"
#include "memory_file.h"

namespace colrow::fuzz {
namespace {

constexpr int64_t kVocabSize = 65536;  // every uint16 id

constexpr const char* kTarget = "token_file";

MemoryFile& file() {
  static MemoryFile instance("tokens");
  return instance;
}

// Every id both ways: one by one, and in one copy.
void check_ids(const TokenFile& tokens) {
  require(kTarget, tokens.size() >= 1, "a token file without tokens was accepted");
  std::vector<int32_t> all(static_cast<size_t>(tokens.size()));
  tokens.copy(0, tokens.size(), all.data());
  for (int64_t i = 0; i < tokens.size(); ++i) {
    require(kTarget, static_cast<int32_t>(tokens.token(i)) == all[i],
            "token() and copy() disagree");
  }
}

void check_batch(const Batch& b) {
  require(
      kTarget,
      b.ids.size() == static_cast<size_t>(b.rows * b.seq_len) && b.targets.size() == b.ids.size(),
      "a batch has the wrong size");
  for (int64_t row = 0; row < b.rows; ++row) {
    for (int64_t t = 0; t + 1 < b.seq_len; ++t) {
      require(kTarget, b.targets[row * b.seq_len + t] == b.ids[row * b.seq_len + t + 1],
              "a target is not the next id");
    }
  }
}

// What `colrow train` does with its data before and during training.
void train_on(std::unique_ptr<TokenSource> source) {
  const TokenDataset data(std::move(source));
  for (const int64_t seq_len : {1, 7}) {
    try {
      data.require_windows(seq_len);
      check_batch(data.train_batch(/*seed=*/1337, /*step=*/3, /*batch_per_rank=*/2, /*dp_size=*/2,
                                   /*dp_rank=*/1, seq_len));
      for (const Batch& b : data.validation_batches(2, 2, 1, seq_len, /*max_windows=*/8)) {
        check_batch(b);
      }
    } catch (const InvalidInputError&) {  // shorter than one window
    }
  }
  try {
    data.require_ids_below(kVocabSize);
    require(kTarget, data.unigram_cross_entropy(kVocabSize) >= 0.0, "a negative cross-entropy");
  } catch (const InvalidInputError&) {  // an id past the vocabulary, an empty split
  }
}

// What `colrow eval` does: every token validates.
void evaluate_on(std::unique_ptr<TokenSource> source) {
  const TokenDataset data = TokenDataset::for_evaluation(std::move(source));
  try {
    for (const Batch& b : data.validation_batches(3, 1, 0, 5)) check_batch(b);
  } catch (const InvalidInputError&) {
  }
}

}  // namespace
}  // namespace colrow::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace colrow;
  fuzz::file().assign(data, size);
  const std::string& path = fuzz::file().path();
  try {  // as a ".bin"
    fuzz::check_ids(TokenFile(path));
    fuzz::train_on(std::make_unique<TokenFileSource>(path));
    fuzz::evaluate_on(std::make_unique<TokenFileSource>(path));
  } catch (const InvalidInputError&) {
  }
  try {  // under any other name: llm.c's magic or text
    fuzz::train_on(open_token_source(path));
  } catch (const InvalidInputError&) {
  }
  return 0;
}
