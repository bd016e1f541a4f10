// Error kinds and their class hierarchy, divisors(), the exact text of
// require_divisible's "[component] name (value) must be divisible by tp (n).
// Choose tp in {...}." message (including the truncated list for values with
// many divisors), and COLROW_CHECK's message, file and line.
#include "colrow/core/error.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace colrow {
namespace {

// The message require_divisible throws, or "" when it does not throw.
std::string divisible_message(const std::string& component, const std::string& field, int64_t value,
                              int tp) {
  try {
    require_divisible(component, field, value, tp);
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.what();
  }
  return "";
}

TEST(ErrorTest, KindsAndHierarchy) {
  EXPECT_EQ(ConfigError("m").kind(), ErrorKind::kConfig);
  EXPECT_EQ(InvalidInputError("m").kind(), ErrorKind::kInvalidInput);
  EXPECT_EQ(BackendError("m").kind(), ErrorKind::kBackend);
  EXPECT_EQ(InternalError("m").kind(), ErrorKind::kInternal);
  // main() catches Error (or std::exception) and prints what().
  try {
    throw InvalidInputError("[data] token id (70000) must be below vocab_size (50257).");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_STREQ(e.what(), "[data] token id (70000) must be below vocab_size (50257).");
  }
  EXPECT_THROW(throw BackendError("x"), std::runtime_error);
  EXPECT_THROW(throw ConfigError("x"), Error);
}

TEST(ErrorTest, KindNames) {
  EXPECT_STREQ(to_string(ErrorKind::kConfig), "configuration error");
  EXPECT_STREQ(to_string(ErrorKind::kInvalidInput), "invalid input");
  EXPECT_STREQ(to_string(ErrorKind::kBackend), "backend failure");
  EXPECT_STREQ(to_string(ErrorKind::kInternal), "internal error");
}

TEST(ErrorTest, Divisors) {
  EXPECT_EQ(divisors(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(divisors(7), (std::vector<int64_t>{1, 7}));
  EXPECT_EQ(divisors(12), (std::vector<int64_t>{1, 2, 3, 4, 6, 12}));
  // A perfect square lists its root once.
  EXPECT_EQ(divisors(36), (std::vector<int64_t>{1, 2, 3, 4, 6, 9, 12, 18, 36}));
  EXPECT_EQ(divisors(4096),
            (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}));
  // 3000 = 2^3 3 5^3: 4 * 2 * 4 = 32 divisors, ascending, each dividing 3000.
  const std::vector<int64_t> d = divisors(3000);
  ASSERT_EQ(d.size(), 32u);
  for (size_t i = 0; i < d.size(); ++i) {
    EXPECT_EQ(3000 % d[i], 0);
    if (i > 0) {
      EXPECT_LT(d[i - 1], d[i]);
    }
  }
  EXPECT_EQ(d.front(), 1);
  EXPECT_EQ(d.back(), 3000);
  // A prime: only 1 and itself.
  EXPECT_EQ(divisors(1000003), (std::vector<int64_t>{1, 1000003}));
}

TEST(ErrorTest, RequireDivisiblePasses) {
  EXPECT_NO_THROW(require_divisible("mlp", "ffn_hidden_size", 3000, 1));
  EXPECT_NO_THROW(require_divisible("mlp", "ffn_hidden_size", 3000, 8));
  EXPECT_NO_THROW(require_divisible("config", "num_heads", 12, 12));
}

TEST(ErrorTest, RequireDivisibleMessageShortList) {
  // STYLE.md's own example, verbatim.
  EXPECT_EQ(divisible_message("config", "num_heads", 12, 5),
            "[config] num_heads (12) must be divisible by tp (5). Choose tp in {1, 2, 3, 4, 6, "
            "12}.");
  EXPECT_EQ(divisible_message("attention", "num_kv_heads", 7, 2),
            "[attention] num_kv_heads (7) must be divisible by tp (2). Choose tp in {1, 7}.");
  // tp larger than the value.
  EXPECT_EQ(divisible_message("config", "num_heads", 4, 8),
            "[config] num_heads (4) must be divisible by tp (8). Choose tp in {1, 2, 4}.");
}

TEST(ErrorTest, RequireDivisibleMessageTruncatesLongLists) {
  // 3000 has 32 divisors: the first 16 are listed, then "...".
  EXPECT_EQ(divisible_message("mlp", "ffn_hidden_size", 3000, 7),
            "[mlp] ffn_hidden_size (3000) must be divisible by tp (7). Choose tp in {1, 2, 3, 4, "
            "5, 6, 8, 10, 12, 15, 20, 24, 25, 30, 40, 50, ...}.");
  // 120 has exactly 16 divisors: all shown, no "...".
  EXPECT_EQ(
      divisible_message("mlp", "hidden", 120, 7),
      "[mlp] hidden (120) must be divisible by tp (7). Choose tp in {1, 2, 3, 4, 5, 6, 8, 10, "
      "12, 15, 20, 24, 30, 40, 60, 120}.");
}

TEST(ErrorTest, RequireDivisibleBadTpOrValue) {
  // tp < 1 must not divide by zero; it is reported with the valid choices.
  EXPECT_EQ(divisible_message("config", "num_heads", 12, 0),
            "[config] num_heads (12) must be divisible by tp (0). Choose tp in {1, 2, 3, 4, 6, "
            "12}.");
  EXPECT_EQ(divisible_message("config", "num_heads", 12, -2),
            "[config] num_heads (12) must be divisible by tp (-2). Choose tp in {1, 2, 3, 4, 6, "
            "12}.");
  // A non-positive dimension has no valid tp; the message says what is wrong.
  EXPECT_EQ(divisible_message("config", "d_model", 0, 2),
            "[config] d_model (0) must be divisible by tp (2). d_model must be positive.");
  EXPECT_EQ(divisible_message("config", "d_model", -4, 2),
            "[config] d_model (-4) must be divisible by tp (2). d_model must be positive.");
}

TEST(ErrorTest, CheckPassesSilently) {
  int evaluations = 0;
  COLROW_CHECK(++evaluations == 1, "evaluated once");
  EXPECT_EQ(evaluations, 1);
}

TEST(ErrorTest, CheckThrowsInternalErrorWithLocation) {
  const int x = 3;
  int line = 0;
  try {
    line = __LINE__ + 1;
    COLROW_CHECK(x > 4, std::string("x too small"));
    FAIL() << "COLROW_CHECK did not throw";
  } catch (const InternalError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    EXPECT_EQ(std::string(e.what()), std::string("[internal] x too small (x > 4) at ") + __FILE__ +
                                         ":" + std::to_string(line));
  }
}

TEST(ErrorTest, CheckIsOneStatement) {
  // do { } while (0): usable as the body of an unbraced if/else.
  bool thrown = false;
  try {
    if (true)
      COLROW_CHECK(1 + 1 == 3, "arithmetic");
    else
      thrown = true;  // never reached
  } catch (const InternalError&) {
    thrown = true;
  }
  EXPECT_TRUE(thrown);
}

}  // namespace
}  // namespace colrow
