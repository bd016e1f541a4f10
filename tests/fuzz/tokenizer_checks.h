// What every tokenizer promises (colrow/data/tokenizer.h), checked on one
// text: ids in [0, vocab_size()), and decode(encode(text)) == text for any
// bytes. Aborts (a finding) when a promise breaks.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "colrow/data/tokenizer.h"

namespace colrow::fuzz {

inline void require_round_trip(const Tokenizer& tokenizer, const std::string& text) {
  const std::vector<int32_t> ids = tokenizer.encode(text);
  for (const int32_t id : ids) {
    if (id < 0 || id >= tokenizer.vocab_size()) {
      std::fprintf(stderr, "[fuzz] %s: id %d outside [0, %lld)\n", tokenizer.name().c_str(), id,
                   static_cast<long long>(tokenizer.vocab_size()));
      std::abort();
    }
  }
  if (tokenizer.decode(ids) != text) {
    std::fprintf(stderr, "[fuzz] %s: decode(encode(text)) != text\n", tokenizer.name().c_str());
    std::abort();
  }
}

// Text that touches every kind of piece GPT-2's pattern cuts: contractions,
// letters, digits, symbols, runs of spaces, non-ASCII letters, invalid UTF-8.
inline const std::string& sample_text() {
  static const std::string text =
      "Hello, world! It's 2024: they'll say \"na\xc3\xafve caf\xc3\xa9\" \xe2\x80\x94 "
      "   spaced\tout\r\n\n\xe6\x97\xa5\xe6\x9c\xac x\xff\xfe\xc3 <|endoftext|>";
  return text;
}

}  // namespace colrow::fuzz
