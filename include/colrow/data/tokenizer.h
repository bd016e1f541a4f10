// Tokenizer: text bytes <-> token ids, the one interface colrow's tokenizers
// share (ByteTokenizer, Gpt2Tokenizer). load_tokenizer picks one from a
// checkpoint or tokenizer directory: GPT-2's byte-level BPE when the directory
// has tokenizer.json or vocab.json + merges.txt, the byte tokenizer otherwise.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace colrow {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // text: any bytes (UTF-8 or not) -> ids, each in [0, vocab_size()).
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // ids -> bytes; decode(encode(t)) == t for every t. An id outside
  // [0, vocab_size()) is an InvalidInputError naming the id and its position.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  // Short and stable ("byte", "gpt2-bpe"): for reports and messages.
  virtual std::string name() const = 0;
};

// dir/tokenizer.json (preferred) or dir/vocab.json + dir/merges.txt: the
// byte-level BPE tokenizer they describe; neither: the byte tokenizer. A
// missing directory, or only one of vocab.json and merges.txt, is an
// InvalidInputError; so is a file that is not a byte-level BPE tokenizer.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir);

}  // namespace colrow
