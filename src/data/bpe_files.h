// Byte-level BPE vocabularies read from files: GPT-2's vocab.json + merges.txt
// and Hugging Face's tokenizer.json. The files spell each byte as one
// printable character (GPT-2's bytes_to_unicode); the readers undo that, so
// BpeVocabulary holds raw bytes. Anything else is an InvalidInputError naming
// the file, the field or line, and the value.
#pragma once

#include <string>

#include "colrow/data/gpt2_tokenizer.h"

namespace colrow {

BpeVocabulary read_vocab_and_merges(const std::string& vocab_json, const std::string& merges_txt);
BpeVocabulary read_tokenizer_json(const std::string& path);

// `bytes` in double quotes for a message, non-printable bytes as \xNN.
std::string quoted_bytes(const std::string& bytes);

}  // namespace colrow
