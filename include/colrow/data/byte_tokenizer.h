// ByteTokenizer: the byte-level tokenizer colrow trains with by default. Token
// id i is the byte i (0..255), so any byte string, UTF-8 or not, encodes and
// decodes back exactly, with no vocabulary file. The model pads the 256 ids to
// a multiple of tp as the model issue describes; ids >= 256 decode to nothing
// and are an InvalidInputError.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "colrow/data/tokenizer.h"

namespace colrow {

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;

  int64_t vocab_size() const override { return kVocabSize; }
  std::string name() const override { return "byte"; }
  // text: n bytes -> n ids, each in [0, 256).
  std::vector<int32_t> encode(const std::string& text) const override;
  // ids: n ids in [0, 256) -> n bytes; any other id is an InvalidInputError
  // naming the id and its position.
  std::string decode(const std::vector<int32_t>& ids) const override;
};

}  // namespace colrow
