// lr_at: warmup, cosine decay and the floor at exact values (llm.c's formula),
// and the configuration checks.
#include "colrow/train/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "colrow/core/error.h"

namespace colrow {
namespace {

TEST(LrSchedule, WarmupIsLinearFromTheFirstStep) {
  const LrSchedule s{/*lr=*/0.4, /*min_lr=*/0.04, /*warmup_steps=*/4, /*total_steps=*/14};
  EXPECT_DOUBLE_EQ(lr_at(s, 0), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(s, 1), 0.2);
  EXPECT_DOUBLE_EQ(lr_at(s, 2), 0.3);
  EXPECT_DOUBLE_EQ(lr_at(s, 3), 0.4);
}

TEST(LrSchedule, CosineDecayReachesMinLrAtTotalSteps) {
  const LrSchedule s{0.4, 0.04, 4, 14};
  EXPECT_DOUBLE_EQ(lr_at(s, 4), 0.4);   // cos(0) = 1
  EXPECT_DOUBLE_EQ(lr_at(s, 9), 0.22);  // halfway: mean
  EXPECT_DOUBLE_EQ(lr_at(s, 6), 0.04 + 0.36 * 0.5 * (1 + std::cos(M_PI * 0.2)));
  EXPECT_DOUBLE_EQ(lr_at(s, 14), 0.04);
  EXPECT_DOUBLE_EQ(lr_at(s, 100), 0.04);
  for (int64_t step = 4; step < 14; ++step) EXPECT_GT(lr_at(s, step), lr_at(s, step + 1));
}

TEST(LrSchedule, NoWarmupAndConstant) {
  EXPECT_DOUBLE_EQ(lr_at({0.5, 0.0, 0, 10}, 0), 0.5);
  EXPECT_DOUBLE_EQ(lr_at({0.5, 0.0, 0, 10}, 5), 0.25);
  EXPECT_DOUBLE_EQ(lr_at({0.5, 0.5, 2, 10}, 7), 0.5);  // min_lr == lr: constant after warmup
  EXPECT_DOUBLE_EQ(lr_at({0.5, 0.1, 3, 3}, 3), 0.1);   // no decay phase: the floor
}

TEST(LrSchedule, BadConfigurationsNameTheField) {
  EXPECT_NO_THROW(validate(LrSchedule{0.1, 0.01, 10, 100}));
  auto message = [](const LrSchedule& s) {
    try {
      validate(s);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({-0.1, 0.0, 0, 1}).find("lr (-0.1"), std::string::npos);
  EXPECT_NE(message({0.1, 0.2, 0, 1}).find("min_lr (0.2"), std::string::npos);
  EXPECT_NE(message({0.1, 0.0, -1, 1}).find("warmup_steps (-1)"), std::string::npos);
  EXPECT_NE(message({0.1, 0.0, 5, 4}).find("total_steps (4) must be >= warmup_steps (5)"),
            std::string::npos);
}

}  // namespace
}  // namespace colrow
