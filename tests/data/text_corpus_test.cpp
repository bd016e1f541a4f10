// TextCorpus: plain and gzip text give the same byte tokens; missing, empty,
// non-regular, corrupt and truncated files give one clear error naming the
// file; open_token_source tells token files from text.
#include "colrow/data/text_corpus.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/data/byte_tokenizer.h"
#include "colrow/data/token_source.h"
#include "support/temp_dir.h"

namespace colrow {
namespace {

class TextCorpusTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    return path;
  }
  // The gzip encoding of `text`, written with zlib itself.
  std::string gzip_bytes(const std::string& text) {
    const std::string path = write("tmp.gz", "");
    gzFile gz = gzopen(path.c_str(), "wb");
    EXPECT_NE(gz, nullptr);
    if (!text.empty()) {
      EXPECT_EQ(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())),
                static_cast<int>(text.size()));
    }
    EXPECT_EQ(gzclose(gz), Z_OK);
    FILE* f = std::fopen(path.c_str(), "rb");
    std::string bytes;
    char buf[4096];
    size_t got = 0;
    while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.append(buf, got);
    std::fclose(f);
    return bytes;
  }

  static std::string error_of(const std::string& path) {
    try {
      TextCorpus corpus(path);
    } catch (const InvalidInputError& e) {
      return e.what();
    }
    return "(no error)";
  }

  std::string text() const {
    std::string t = "The Jargon File, caf\xc3\xa9 \xe2\x86\x92 hacker slang.\n";
    for (int i = 0; i < 200; ++i) t += "line " + std::to_string(i) + ": foo bar baz\n";
    return t;
  }

  testing::TempDir temp_{"text_corpus"};
  std::string dir_ = temp_.path();
};

TEST_F(TextCorpusTest, PlainAndGzipGiveTheSameByteTokens) {
  const std::string t = text();
  const TextCorpus plain(write("plain.txt", t));
  const TextCorpus gz(write("text.gz", gzip_bytes(t)));
  EXPECT_EQ(plain.tokens(), ByteTokenizer().encode(t));
  EXPECT_EQ(gz.tokens(), plain.tokens());
  ASSERT_EQ(gz.size(), static_cast<int64_t>(t.size()));
  std::vector<int32_t> out(5);
  gz.copy(4, 5, out.data());
  EXPECT_EQ(ByteTokenizer().decode(out), "Jargo");
  EXPECT_THROW(gz.copy(gz.size() - 2, 5, out.data()), InternalError);
  // Detection is by the magic bytes, not the name.
  EXPECT_EQ(TextCorpus(write("named.txt", gzip_bytes(t))).tokens(), plain.tokens());
  // Two gzip members read one after the other, as gunzip does.
  EXPECT_EQ(TextCorpus(write("two.gz", gzip_bytes("ab") + gzip_bytes("cd"))).tokens(),
            ByteTokenizer().encode("abcd"));
}

TEST_F(TextCorpusTest, BadFilesNameTheFileAndTheProblem) {
  const std::string missing = dir_ + "/missing.txt";
  EXPECT_EQ(error_of(missing),
            "[data] cannot open text file " + missing + ": No such file or directory.");
  const std::string empty = write("empty.txt", "");
  EXPECT_EQ(error_of(empty), "[data] text file " + empty + " is empty.");
  const std::string empty_gz = write("empty.gz", gzip_bytes(""));
  EXPECT_EQ(error_of(empty_gz), "[data] text file " + empty_gz + " is empty once inflated.");
  EXPECT_EQ(error_of(dir_), "[data] text file " + dir_ + " is not a regular file.");

  const std::string corrupt =
      write("corrupt.gz", std::string("\x1f\x8b\x08\x00", 4) + std::string(64, '\x5a'));
  const std::string e = error_of(corrupt);
  EXPECT_EQ(e.rfind("[data] text file " + corrupt +
                        " starts like gzip (bytes 1f 8b) but does not inflate: ",
                    0),
            0u)
      << e;
  EXPECT_NE(e.find("gzip -t " + corrupt), std::string::npos) << e;

  const std::string whole = gzip_bytes(text());
  const std::string cut = write("cut.gz", whole.substr(0, whole.size() / 2));
  EXPECT_NE(error_of(cut).find("but does not inflate"), std::string::npos) << error_of(cut);
}

TEST_F(TextCorpusTest, UnreadableFileIsAnError) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  const std::string path = write("secret.txt", "abc");
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  EXPECT_EQ(error_of(path), "[data] cannot open text file " + path + ": Permission denied.");
}

TEST_F(TextCorpusTest, DefaultCorpusLoadsOrSaysHowToInstallIt) {
  struct stat st;
  if (::stat(kDefaultCorpus, &st) != 0) {
    const std::string e = error_of(kDefaultCorpus);
    EXPECT_NE(e.find(kDefaultCorpus), std::string::npos) << e;
    EXPECT_NE(e.find("apt-get install jargon-text"), std::string::npos) << e;
    EXPECT_NE(e.find("path-exclude"), std::string::npos) << e;
    return;
  }
  const TextCorpus jargon;  // the default argument
  EXPECT_EQ(jargon.path(), kDefaultCorpus);
  EXPECT_GT(jargon.size(), 1000000);  // 4.4.7 inflates to about 1.7 MB
  std::vector<int32_t> head(64);
  jargon.copy(0, 64, head.data());
  EXPECT_NE(ByteTokenizer().decode(head).find("Jargon"), std::string::npos);
}

TEST_F(TextCorpusTest, OpenTokenSourceTellsTokenFilesFromText) {
  const std::string bin = write("ids.bin", std::string("\x05\x00\x10\x01", 4));
  const auto tokens = open_token_source(bin);
  ASSERT_EQ(tokens->size(), 2);  // raw uint16: 5, 272
  int32_t ids[2];
  tokens->copy(0, 2, ids);
  EXPECT_EQ(ids[0], 5);
  EXPECT_EQ(ids[1], 272);
  const auto txt = open_token_source(write("t.txt", "hey"));
  EXPECT_EQ(txt->size(), 3);
  EXPECT_EQ(txt->path(), dir_ + "/t.txt");
  const auto gz = open_token_source(write("t.txt.gz", gzip_bytes("hey!")));
  EXPECT_EQ(gz->size(), 4);
}

}  // namespace
}  // namespace colrow
