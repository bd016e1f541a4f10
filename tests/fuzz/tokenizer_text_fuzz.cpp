// Fuzzes the tokenizers on arbitrary text (src/data/gpt2_tokenizer.cpp,
// gpt2_pretokenizer.cpp, byte_tokenizer.cpp). The input is the text. The
// GPT-2 tokenizer has a fixed vocabulary (all 256 bytes plus merges chosen to
// chain and overlap: "aa" + "a", "ab" + "a" against "a" + "ba", ...); its ids
// must equal those of openai/gpt-2's encoder.py bpe(), written plainly below,
// piece by piece, and the pre-tokenizer's pieces must tile the text. Both
// tokenizers must round-trip the text, and decoding the input read as int32
// ids must either succeed or name a bad id.
// Expected: InvalidInputError only for ids outside the vocabulary. A finding: a
// crash, an ASan or UBSan report, any exception while encoding (BackendError
// from PCRE2 included), ids that differ from encoder.py's, pieces that do not
// tile the text, a broken round trip, a hang.
// The tokenizer keeps a cache of pieces across inputs, so a finding may need
// the inputs before it; the differential check catches a stale cache entry.
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/data/byte_tokenizer.h"
#include "colrow/data/gpt2_tokenizer.h"
#include "data/gpt2_pretokenizer.h"
#include "finding.h"
#include "tokenizer_checks.h"

namespace colrow::fuzz {
namespace {

constexpr const char* kTarget = "tokenizer_text";

// Merges by rank; each result becomes a token.
const std::vector<std::pair<std::string, std::string>>& merge_list() {
  static const std::vector<std::pair<std::string, std::string>> merges = {
      {"a", "a"},       {" ", "t"},           {"b", "a"},  {"aa", "a"},      {"t", "h"},
      {"a", "b"},       {" t", "h"},          {"ab", "a"}, {"a", "ba"},      {"aa", "aa"},
      {"th", "e"},      {" th", "e"},         {"b", "b"},  {"e", "r"},       {"i", "n"},
      {"in", "g"},      {" ", "a"},           {" a", "b"}, {" ", " "},       {"  ", " "},
      {"  ", "  "},     {"\n", "\n"},         {"1", "2"},  {"12", "3"},      {"0", "0"},
      {"00", "0"},      {"'", "s"},           {"!", "!"},  {"\xc3", "\xa9"}, {"e", "s"},
      {"es", "s"},      {"s", "s"},           {"ba", "b"}, {"bab", "a"},     {"aaa", "aaa"},
      {"\xe6", "\x97"}, {"\xe6\x97", "\xa5"}, {"o", "o"},  {"oo", "o"},      {" ", "b"},
  };
  return merges;
}

BpeVocabulary vocabulary() {
  BpeVocabulary v;
  v.source = "the fuzz vocabulary";
  for (int b = 0; b < 256; ++b) v.tokens.emplace_back(1, static_cast<char>(b));
  for (const auto& [left, right] : merge_list()) {
    bool known = false;
    for (const std::string& t : v.tokens) known = known || t == left + right;
    if (!known) v.tokens.push_back(left + right);
    v.merges.emplace_back(left, right);
  }
  return v;
}

// openai/gpt-2 encoder.py's bpe(): merge the lowest-ranked adjacent pair,
// every occurrence left to right, until no ranked pair is left.
std::vector<int32_t> reference_bpe(const Gpt2Tokenizer& tokenizer, std::string_view piece) {
  static const std::map<std::pair<std::string, std::string>, int> ranks = [] {
    std::map<std::pair<std::string, std::string>, int> r;
    for (const auto& m : merge_list()) r.emplace(m, static_cast<int>(r.size()));
    return r;
  }();
  std::vector<std::string> word;
  for (const char c : piece) word.emplace_back(1, c);
  while (word.size() > 1) {
    int best = INT_MAX;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const auto it = ranks.find({word[i], word[i + 1]});
      if (it != ranks.end() && it->second < best) best = it->second;
    }
    if (best == INT_MAX) break;
    const auto& [first, second] = merge_list()[best];
    std::vector<std::string> merged;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(word[i]);
        i += 1;
      }
    }
    word = std::move(merged);
  }
  std::vector<int32_t> ids;
  for (const std::string& token : word) ids.push_back(tokenizer.token_id(token));
  return ids;
}

void check_gpt2(const std::string& text) {
  static const Gpt2Tokenizer tokenizer(vocabulary());
  static const Gpt2Pretokenizer pretokenizer;
  std::string tiled;
  std::vector<int32_t> expected;
  pretokenizer.split(text, [&](std::string_view piece) {
    require(kTarget, !piece.empty(), "an empty piece");
    tiled.append(piece);
    const std::vector<int32_t> ids = reference_bpe(tokenizer, piece);
    expected.insert(expected.end(), ids.begin(), ids.end());
  });
  require(kTarget, tiled == text, "the pieces do not tile the text");
  require(kTarget, tokenizer.encode(text) == expected, "ids differ from encoder.py's bpe()");
  require_round_trip(tokenizer, text);
}

// Decoding arbitrary ids: every id in range, or an InvalidInputError.
void check_decode(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  bool in_range = true;
  for (const int32_t id : ids) in_range = in_range && id >= 0 && id < tokenizer.vocab_size();
  try {
    tokenizer.decode(ids);
    require(kTarget, in_range, "an id outside the vocabulary was decoded");
  } catch (const InvalidInputError&) {
    require(kTarget, !in_range, "ids inside the vocabulary were refused");
  }
}

}  // namespace
}  // namespace colrow::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace colrow;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::check_gpt2(text);
  static const ByteTokenizer bytes;
  fuzz::require_round_trip(bytes, text);
  std::vector<int32_t> ids(size / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data, 4 * ids.size());
  fuzz::check_decode(bytes, ids);
  static const Gpt2Tokenizer gpt2(fuzz::vocabulary());
  fuzz::check_decode(gpt2, ids);
  return 0;
}
