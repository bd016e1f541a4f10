// ByteTokenizer: every byte string (UTF-8 included) round-trips exactly, ids
// are the byte values, and ids outside [0, 256) are an error.
#include "colrow/data/byte_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "colrow/core/error.h"

namespace colrow {
namespace {

TEST(ByteTokenizerTest, IdsAreTheBytes) {
  const ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_EQ(tok.encode("Az\n"), (std::vector<int32_t>{65, 122, 10}));
  // "é" is C3 A9 and "€" is E2 82 AC in UTF-8: one id per byte, never negative.
  EXPECT_EQ(tok.encode("\xc3\xa9\xe2\x82\xac"),
            (std::vector<int32_t>{0xc3, 0xa9, 0xe2, 0x82, 0xac}));
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(ByteTokenizerTest, RoundTripsEveryByteAndUtf8) {
  const ByteTokenizer tok;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));  // NUL included
  EXPECT_EQ(tok.decode(tok.encode(all)), all);
  const std::string utf8 = "na\xc3\xafve caf\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x98\x80 \xe4\xb8\xad";
  EXPECT_EQ(tok.encode(utf8).size(), utf8.size());
  EXPECT_EQ(tok.decode(tok.encode(utf8)), utf8);
}

TEST(ByteTokenizerTest, IdsOutsideTheBytesAreAnError) {
  const ByteTokenizer tok;
  try {
    tok.decode({104, 105, 256});
    FAIL() << "id 256 decoded";
  } catch (const InvalidInputError& e) {
    EXPECT_NE(std::string(e.what()).find("token id (256) at position 2 must be in [0, 256)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(tok.decode({-1}), InvalidInputError);
}

}  // namespace
}  // namespace colrow
