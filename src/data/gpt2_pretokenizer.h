// GPT-2's pre-tokenizer: cuts text into the pieces BPE merges within, with
// GPT-2's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// compiled by PCRE2 in UTF mode, \s being Unicode's White_Space as in Python's
// regex module. Invalid UTF-8 is a barrier no piece crosses (PCRE2_MATCH_INVALID_UTF);
// each invalid byte becomes a one-byte piece, so the pieces always tile the text.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

namespace colrow {

class Gpt2Pretokenizer {
 public:
  Gpt2Pretokenizer();  // compiles (and JIT-compiles) the pattern
  ~Gpt2Pretokenizer();
  Gpt2Pretokenizer(const Gpt2Pretokenizer&) = delete;
  Gpt2Pretokenizer& operator=(const Gpt2Pretokenizer&) = delete;

  // Calls `piece` on each piece of `text`, in order; together they are `text`.
  void split(std::string_view text, const std::function<void(std::string_view)>& piece) const;

 private:
  struct Pattern;  // the compiled PCRE2 code
  std::unique_ptr<Pattern> pattern_;
};

}  // namespace colrow
