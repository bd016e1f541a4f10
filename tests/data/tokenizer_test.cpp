// load_tokenizer: which tokenizer a directory gives (byte, vocab.json +
// merges.txt, tokenizer.json), and Hugging Face's tokenizer.json read as GPT-2's
// files are: the same ids from a tokenizer.json made of GPT-2's own files, a
// hand-made one, and one clear error for each setting colrow does not implement.
#include "colrow/data/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/data/gpt2_tokenizer.h"
#include "colrow/data/text_corpus.h"
#include "support/temp_dir.h"

namespace colrow {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kGpt2Dir = COLROW_GPT2_TOKENIZER_DIR;  // set by tests/CMakeLists.txt

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// GPT-2's bytes_to_unicode, written out again as the tests' own reference:
// the character a byte-level vocabulary spells byte b with, as UTF-8.
std::string byte_level(const std::string& bytes) {
  std::string out;
  for (const char c : bytes) {
    const int b = static_cast<unsigned char>(c);
    int code_point = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
      int n = 0;  // rank of b among the bytes that are not printable
      for (int x = 0; x < b; ++x)
        n += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
      code_point = 256 + n;
    }
    if (code_point < 0x80) {
      out.push_back(static_cast<char>(code_point));
    } else {
      out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
      out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
    }
  }
  return out;
}

class TokenizerTest : public ::testing::Test {
 protected:
  // A tiny byte-level BPE in Hugging Face's layout: the 256 bytes, then "hi"
  // and " hi" (merges h+i, then space+hi), as GPT-2's tokenizer.json is laid out.
  static json tiny_tokenizer_json() {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_level(std::string(1, static_cast<char>(b)))] = b;
    vocab[byte_level("hi")] = 256;
    vocab[byte_level(" hi")] = 257;
    return {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", {{{"id", 258}, {"content", "<|endoftext|>"}, {"special", true}}}},
            {"normalizer", nullptr},
            {"pre_tokenizer",
             {{"type", "ByteLevel"},
              {"add_prefix_space", false},
              {"trim_offsets", true},
              {"use_regex", true}}},
            {"post_processor", {{"type", "ByteLevel"}, {"trim_offsets", false}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"continuing_subword_prefix", ""},
              {"end_of_word_suffix", ""},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"vocab", vocab},
              {"merges", {"h i", byte_level(" ") + " hi"}}}}};
  }

  // load_tokenizer on a directory holding only this tokenizer.json must fail
  // with `message`.
  void expect_refused(const json& tokenizer, const std::string& message) {
    write(dir_ / "tokenizer.json", tokenizer.dump());
    expect_refused_text(message);
  }
  void expect_refused_text(const std::string& message, const fs::path& dir = {}) {
    try {
      load_tokenizer((dir.empty() ? dir_ : dir).string());
      ADD_FAILURE() << "accepted; expected: " << message;
    } catch (const InvalidInputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  void require_gpt2_files() {
    ASSERT_TRUE(fs::exists(kGpt2Dir + "/vocab.json") && fs::exists(kGpt2Dir + "/merges.txt"))
        << "GPT-2's vocab.json and merges.txt are missing from " << kGpt2Dir
        << ". Run scripts/install-deps.sh, or configure with "
           "-DCOLROW_GPT2_TOKENIZER_DIR=<a directory holding them>.";
  }

  testing::TempDir temp_{"tokenizer"};
  fs::path dir_{temp_.path()};
};

TEST_F(TokenizerTest, AnEmptyDirectoryGivesTheByteTokenizer) {
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(dir_.string());
  EXPECT_EQ(tokenizer->name(), "byte");
  EXPECT_EQ(tokenizer->vocab_size(), 256);
  EXPECT_EQ(tokenizer->encode("hi\n"), (std::vector<int32_t>{104, 105, 10}));
  EXPECT_EQ(tokenizer->decode({104, 105}), "hi");
  EXPECT_THROW(tokenizer->decode({256}), InvalidInputError);
}

TEST_F(TokenizerTest, GptFilesGiveTheBpeTokenizer) {
  ASSERT_NO_FATAL_FAILURE(require_gpt2_files());
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(kGpt2Dir);
  EXPECT_EQ(tokenizer->name(), "gpt2-bpe");
  EXPECT_EQ(tokenizer->vocab_size(), 50257);
  EXPECT_EQ(tokenizer->encode("Hello, world!"), (std::vector<int32_t>{15496, 11, 995, 0}));
}

TEST_F(TokenizerTest, MissingDirectoryOrHalfATokenizerIsAnError) {
  expect_refused_text("directory (" + (dir_ / "nowhere").string() + ") does not exist",
                      dir_ / "nowhere");
  write(dir_ / "file", "a file");
  expect_refused_text("directory (" + (dir_ / "file").string() + ") is a file", dir_ / "file");
  fs::remove(dir_ / "file");
  write(dir_ / "vocab.json", "{}");
  expect_refused_text("has vocab.json but no merges.txt; a BPE tokenizer needs both");
  fs::remove(dir_ / "vocab.json");
  write(dir_ / "merges.txt", "#version: 0.2\n");
  expect_refused_text("has merges.txt but no vocab.json");
}

// GPT-2's vocab.json + merges.txt rewritten as a tokenizer.json (both merge
// spellings Hugging Face writes) encode the Jargon File to the same ids.
TEST_F(TokenizerTest, TokenizerJsonOfGpt2FilesGivesTheSameIds) {
  ASSERT_NO_FATAL_FAILURE(require_gpt2_files());
  json tokenizer = tiny_tokenizer_json();
  tokenizer["model"]["vocab"] = json::parse(read(kGpt2Dir + "/vocab.json"));
  json merges_as_strings = json::array();
  json merges_as_pairs = json::array();
  std::istringstream lines(read(kGpt2Dir + "/merges.txt"));
  std::string line;
  std::getline(lines, line);  // "#version: 0.2"
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    merges_as_strings.push_back(line);
    merges_as_pairs.push_back({line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1)});
  }
  ASSERT_EQ(merges_as_strings.size(), 50000u);
  tokenizer["added_tokens"] = {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}};

  const std::unique_ptr<Tokenizer> files = load_tokenizer(kGpt2Dir);
  const std::string text = read_text_file(kDefaultCorpus).substr(0, 300000) +
                           " caf\xc3\xa9 \xf0\x9f\x98\x80 it's\n\n  12345 \xff";
  const std::vector<int32_t> expected = files->encode(text);
  for (const json& merges : {merges_as_strings, merges_as_pairs}) {
    tokenizer["model"]["merges"] = merges;
    write(dir_ / "tokenizer.json", tokenizer.dump());
    const std::unique_ptr<Tokenizer> from_json = load_tokenizer(dir_.string());
    EXPECT_EQ(from_json->name(), "gpt2-bpe");
    EXPECT_EQ(from_json->vocab_size(), 50257);
    EXPECT_TRUE(from_json->encode(text) == expected) << "tokenizer.json encodes differently";
    EXPECT_EQ(from_json->decode({50256}), "<|endoftext|>");
  }
}

TEST_F(TokenizerTest, HandMadeTokenizerJson) {
  write(dir_ / "tokenizer.json", tiny_tokenizer_json().dump());
  write(dir_ / "vocab.json", "not read: tokenizer.json comes first");
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(dir_.string());
  EXPECT_EQ(tokenizer->vocab_size(), 259);  // 256 bytes, "hi", " hi", <|endoftext|>
  EXPECT_EQ(tokenizer->encode("hi hi hid"), (std::vector<int32_t>{256, 257, 257, 'd'}));
  EXPECT_EQ(tokenizer->encode("ih"), (std::vector<int32_t>{'i', 'h'}));
  // The added token decodes to its text; in text it is plain bytes, as in GPT-2.
  EXPECT_EQ(tokenizer->decode({256, 258, 257}), "hi<|endoftext|> hi");
  EXPECT_EQ(tokenizer->encode("<|endoftext|>").size(), 13u);
}

TEST_F(TokenizerTest, RefusesWhatIsNotGpt2sByteLevelBpe) {
  json t = tiny_tokenizer_json();
  t["model"]["type"] = "WordPiece";
  expect_refused(t, "tokenizer.json: model.type (WordPiece) must be BPE");
  t = tiny_tokenizer_json();
  t.erase("model");
  expect_refused(t, "model.type (null) must be BPE");
  t = tiny_tokenizer_json();
  t["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_refused(t, "pre_tokenizer.type (Whitespace) must be ByteLevel");
  t["pre_tokenizer"] = nullptr;
  expect_refused(t, "pre_tokenizer.type (null) must be ByteLevel");
  t = tiny_tokenizer_json();
  t["pre_tokenizer"]["add_prefix_space"] = true;
  expect_refused(t, "pre_tokenizer.add_prefix_space (true) must be false");
  t = tiny_tokenizer_json();
  t["normalizer"] = {{"type", "NFC"}};
  expect_refused(t, "normalizer.type (NFC) must be null");
  t = tiny_tokenizer_json();
  t["decoder"] = {{"type", "WordPiece"}};
  expect_refused(t, "decoder.type (WordPiece) must be ByteLevel or null");
  t = tiny_tokenizer_json();
  t["post_processor"] = {{"type", "TemplateProcessing"}};
  expect_refused(t, "post_processor.type (TemplateProcessing) must be ByteLevel or null");
  t = tiny_tokenizer_json();
  t["model"]["byte_fallback"] = true;
  expect_refused(t, "model.byte_fallback (true) must be false");
  t = tiny_tokenizer_json();
  t["model"]["continuing_subword_prefix"] = "##";
  expect_refused(t, "model.continuing_subword_prefix (##) must be ");
}

TEST_F(TokenizerTest, RefusesBrokenVocabularies) {
  write(dir_ / "tokenizer.json", "{\"model\": ");
  expect_refused_text("tokenizer.json is not valid JSON");
  json t = tiny_tokenizer_json();
  t["model"]["vocab"]["hi there"] = 258;  // a plain space is not in the byte-level alphabet
  expect_refused(t,
                 "model.vocab token (\"hi there\") must be spelled in GPT-2's byte-level alphabet");
  t = tiny_tokenizer_json();
  t["model"]["vocab"][byte_level(" hi")] = 300;
  expect_refused(t, "the id (300) of token \"\\xc4\\xa0hi\" must be an integer in [0, 258)");
  t = tiny_tokenizer_json();
  t["model"]["merges"].push_back("x y");
  expect_refused(t, "(\"x\" + \"y\") must join two tokens into a token; \"xy\" is not in the");
  t = tiny_tokenizer_json();
  t["model"]["merges"].push_back("h i j");
  expect_refused(t, "model.merges[2] (\"h i j\") must be two tokens separated by one space");
  // GPT-2's file layout: a merges.txt line that is not two tokens names its line.
  fs::remove(dir_ / "tokenizer.json");
  write(dir_ / "vocab.json", tiny_tokenizer_json()["model"]["vocab"].dump());
  write(dir_ / "merges.txt", "#version: 0.2\nh i\nhi\n");
  expect_refused_text("merges.txt line 3 (\"hi\") must be two tokens separated by one space");
  write(dir_ / "merges.txt", "#version: 0.2\nh i\n" + byte_level(" ") + " hi\n");
  EXPECT_EQ(load_tokenizer(dir_.string())->encode(" hi"), (std::vector<int32_t>{257}));
}

// Found while writing tests/fuzz/tokenizer_json_fuzz: "model": "BPE" passed
// the type check, then json::value() on the string threw nlohmann's type_error.
TEST_F(TokenizerTest, ModelThatIsNotAnObjectIsRefused) {
  json t = tiny_tokenizer_json();
  t["model"] = "BPE";
  expect_refused(
      t, "tokenizer.json: model (\"BPE\") must be an object holding type, vocab and merges");
}

// What tests/fuzz/model_config_fuzz found in config.json, here too: a number
// too large for a double is nlohmann's out_of_range, not parse_error, and escaped.
TEST_F(TokenizerTest, NumberTooLargeForADoubleIsInvalidJson) {
  write(dir_ / "tokenizer.json", R"({"model": {"type": "BPE", "dropout": 1e999}})");
  expect_refused_text("tokenizer.json is not valid JSON");
  fs::remove(dir_ / "tokenizer.json");
  write(dir_ / "vocab.json", R"({"a": 1e999})");
  write(dir_ / "merges.txt", "#version: 0.2\n");
  expect_refused_text("vocab.json is not valid JSON");
}

}  // namespace
}  // namespace colrow
