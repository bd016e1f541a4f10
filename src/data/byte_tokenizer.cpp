// The byte-level tokenizer: id = byte value.
#include "colrow/data/byte_tokenizer.h"

#include "colrow/core/error.h"

namespace colrow {

std::vector<int32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= kVocabSize) {
      throw InvalidInputError("[tokenizer] token id (" + std::to_string(ids[i]) + ") at position " +
                              std::to_string(i) + " must be in [0, 256) for the byte tokenizer. " +
                              "Ids past 255 are vocabulary padding, which a trained model "
                              "should not sample; restrict sampling to the first 256 logits.");
    }
    text[i] = static_cast<char>(static_cast<unsigned char>(ids[i]));
  }
  return text;
}

}  // namespace colrow
