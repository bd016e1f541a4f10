// TokenFile: raw uint16 files and llm.c's headed files (versions 1 and 2)
// read back exactly, and every malformed file gives one clear error that
// names the file.
#include "colrow/data/token_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "support/temp_dir.h"

namespace colrow {
namespace {

class TokenFileTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::vector<unsigned char>& bytes) {
    const std::string path = dir_ + "/" + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    return path;
  }

  static void put_u32(std::vector<unsigned char>& b, uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<unsigned char>(v >> (8 * i)));
  }
  static void put_u16(std::vector<unsigned char>& b, uint32_t v) {
    b.push_back(static_cast<unsigned char>(v));
    b.push_back(static_cast<unsigned char>(v >> 8));
  }
  static std::vector<unsigned char> llmc(uint32_t version, uint32_t count,
                                         const std::vector<uint32_t>& ids) {
    std::vector<unsigned char> b;
    put_u32(b, TokenFile::kLlmcMagic);
    put_u32(b, version);
    put_u32(b, count);
    b.resize(1024, 0);
    for (uint32_t id : ids) version == 1 ? put_u16(b, id) : put_u32(b, id);
    return b;
  }

  static std::string error_of(const std::string& path) {
    try {
      TokenFile file(path);
    } catch (const InvalidInputError& e) {
      return e.what();
    }
    return "(no error)";
  }

  testing::TempDir temp_{"token_file"};
  std::string dir_ = temp_.path();
};

TEST_F(TokenFileTest, RawUint16IdsReadBackLittleEndian) {
  std::vector<unsigned char> b;
  for (uint32_t id : {0u, 1u, 50256u, 65535u, 258u}) put_u16(b, id);
  TokenFile file(write("raw.bin", b));
  EXPECT_FALSE(file.has_llmc_header());
  ASSERT_EQ(file.size(), 5);
  EXPECT_EQ(file.token(2), 50256);
  EXPECT_EQ(file.token(3), 65535);
  std::vector<int32_t> out(3);
  file.copy(2, 3, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{50256, 65535, 258}));
  EXPECT_THROW(file.copy(3, 3, out.data()), InternalError);
}

TEST_F(TokenFileTest, LlmcHeaderVersion1And2) {
  TokenFile v1(write("v1.bin", llmc(1, 3, {7, 50256, 9})));
  EXPECT_TRUE(v1.has_llmc_header());
  ASSERT_EQ(v1.size(), 3);
  EXPECT_EQ(v1.token(1), 50256);
  TokenFile v2(write("v2.bin", llmc(2, 2, {128000, 5})));
  ASSERT_EQ(v2.size(), 2);
  EXPECT_EQ(v2.token(0), 128000);
  EXPECT_EQ(v2.token(1), 5);
}

TEST_F(TokenFileTest, MalformedFilesNameTheFileAndTheProblem) {
  const std::string missing = dir_ + "/missing.bin";
  EXPECT_EQ(error_of(missing),
            "[data] cannot open token file " + missing + ": No such file or directory.");
  const std::string empty = write("empty.bin", {});
  EXPECT_EQ(error_of(empty), "[data] token file " + empty + " is empty.");
  const std::string odd = write("odd.bin", {1, 2, 3});
  EXPECT_EQ(error_of(odd), "[data] token file " + odd +
                               " has 3 bytes; raw uint16 ids need an even count. Is it truncated?");
  std::vector<unsigned char> short_header;
  put_u32(short_header, TokenFile::kLlmcMagic);
  put_u32(short_header, 1);
  const std::string cut = write("cut.bin", short_header);
  EXPECT_NE(error_of(cut).find("shorter than its 1024-byte header"), std::string::npos);
  const std::string v3 = write("v3.bin", llmc(3, 1, {1}));
  EXPECT_EQ(error_of(v3), "[data] token file " + v3 +
                              ": llm.c header version (3) must be 1 (uint16 ids) or 2 (uint32).");
  const std::string lying = write("lying.bin", llmc(1, 4, {1, 2, 3}));
  EXPECT_EQ(error_of(lying), "[data] token file " + lying +
                                 ": its header says 4 tokens (1032 bytes) but the file has 1030 "
                                 "bytes.");
  const std::string none = write("none.bin", llmc(1, 0, {}));
  EXPECT_EQ(error_of(none), "[data] token file " + none + " holds no tokens.");
  EXPECT_NE(error_of(dir_).find("is not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace colrow
