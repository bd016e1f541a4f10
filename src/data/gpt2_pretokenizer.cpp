// GPT-2's pre-tokenizer regex through PCRE2 (8-bit code units, UTF-8).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/gpt2_pretokenizer.h"

#include <pcre2.h>

#include <string>

#include "colrow/core/error.h"

namespace colrow {
namespace {

// openai/gpt-2 src/encoder.py's pattern with \s spelled out as Unicode's
// White_Space property, which Python's regex module matches: Z plus \t-\r and
// U+0085. (PCRE2's own \s, even with PCRE2_UCP, also takes U+180E.)
#define COLROW_WHITE_SPACE R"(\p{Z}\t-\r\x{85})"
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^)" COLROW_WHITE_SPACE R"(\p{L}\p{N}]+)"
    R"(|[)" COLROW_WHITE_SPACE R"(]+(?![^)" COLROW_WHITE_SPACE R"(])|[)" COLROW_WHITE_SPACE R"(]+)";
#undef COLROW_WHITE_SPACE

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

struct MatchDataFree {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

}  // namespace

struct Gpt2Pretokenizer::Pattern {
  pcre2_code* code = nullptr;
  ~Pattern() { pcre2_code_free(code); }
};

Gpt2Pretokenizer::Gpt2Pretokenizer() : pattern_(std::make_unique<Pattern>()) {
  const uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pattern_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                                 options, &error, &error_offset, nullptr);
  if (pattern_->code == nullptr) {
    throw BackendError("[tokenizer] PCRE2 cannot compile GPT-2's pattern at offset " +
                       std::to_string(error_offset) + ": " + pcre2_message(error) +
                       ". Is libpcre2-8 built with Unicode support?");
  }
  // Without a JIT (some platforms) pcre2_match interprets: slower, same pieces.
  pcre2_jit_compile(pattern_->code, PCRE2_JIT_COMPLETE);
}

Gpt2Pretokenizer::~Gpt2Pretokenizer() = default;

void Gpt2Pretokenizer::split(std::string_view text,
                             const std::function<void(std::string_view)>& piece) const {
  std::unique_ptr<pcre2_match_data, MatchDataFree> match(
      pcre2_match_data_create_from_pattern(pattern_->code, nullptr));
  if (!match) throw BackendError("[tokenizer] PCRE2 cannot allocate match data.");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  while (offset < text.size()) {
    const int rc =
        pcre2_match(pattern_->code, subject, text.size(), offset, 0, match.get(), nullptr);
    size_t start = text.size();
    size_t end = text.size();
    if (rc >= 0) {
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
      start = ovector[0];
      end = ovector[1];
    } else if (rc != PCRE2_ERROR_NOMATCH) {
      throw BackendError("[tokenizer] PCRE2 failed at byte " + std::to_string(offset) +
                         " of the text: " + pcre2_message(rc) + ".");
    }
    // Every valid character matches some alternative, so whatever the match
    // skipped is invalid UTF-8: one piece per byte.
    for (; offset < start; ++offset) piece(text.substr(offset, 1));
    if (end > start) piece(text.substr(start, end - start));
    offset = end;
  }
}

}  // namespace colrow
