// `colrow tokenize`: a text file (plain or gzip) -> a token file that TokenFile
// reads (raw little-endian uint16 ids, or llm.c's header + uint16 ids), with the
// tokenizer of a directory (load_tokenizer: GPT-2's BPE, or bytes).
#pragma once

#include <string>

#include "colrow/runtime/placement.h"

namespace colrow::apps {

struct TokenizeOptions {
  std::string tokenizer;       // directory: tokenizer.json, vocab.json + merges.txt, or neither
  std::string input;           // text file
  std::string output;          // token file, replaced atomically
  std::string format = "raw";  // raw | llmc
  bool json = false;
};

// Every rank checks the options, the tokenizer and the input alike; rank 0
// alone encodes and writes. Returns the process exit status.
int run_tokenize(const TokenizeOptions& options, const Launch& launch);

}  // namespace colrow::apps
