// StepProfile: which steps are profiled (the first is skipped when another
// follows), and a report, once, after the last one, with per-step averages.
#include "train/step_profile.h"

#include <gtest/gtest.h>

#include "kernels/ops.h"

namespace colrow {
namespace {

void one_step_of_work() {
  Tensor a = Tensor::full({8, 8}, 1.0f), c = Tensor::empty({8, 8});
  ops::gemm(kernels::Trans::kNo, kernels::Trans::kNo, 1.0f, a, a, 0.0f, c);
  ops::gemm(kernels::Trans::kNo, kernels::Trans::kNo, 1.0f, a, a, 0.0f, c);
  ops::add(a, a, c);
}

TEST(StepProfile, ProfilesTheStepsAfterTheFirstAndReportsAfterTheLast) {
  kernels::take_op_times();
  StepProfile profile(2);
  std::string report;
  for (int64_t step = 1; step <= 5; ++step) {
    profile.begin_step(step, 5);
    EXPECT_EQ(kernels::op_profiling(), step == 2 || step == 3) << "step " << step;
    one_step_of_work();
    const std::string r = profile.end_step(10.0);
    EXPECT_FALSE(kernels::op_profiling()) << "off after each step (validation stays out)";
    if (step == 3) {
      report = r;
    } else {
      EXPECT_EQ(r, "") << "step " << step;
    }
  }
  EXPECT_NE(report.find("profile: steps 2-3, 10.00 ms per step"), std::string::npos) << report;
  // Two gemm calls and one add per step, averaged over the two steps.
  EXPECT_NE(report.find("gemm                                      2.0"), std::string::npos)
      << report;
  EXPECT_NE(report.find("add                                       1.0"), std::string::npos)
      << report;
  EXPECT_NE(report.find("untimed (communication, host, idle)"), std::string::npos);
}

TEST(StepProfile, ARunOfOneStepProfilesThatStep) {
  StepProfile profile(3);
  profile.begin_step(1, 1);
  EXPECT_TRUE(kernels::op_profiling());
  one_step_of_work();
  EXPECT_NE(profile.end_step(5.0).find("profile: steps 1-1"), std::string::npos);
}

TEST(StepProfile, ZeroStepsProfilesNothing) {
  StepProfile profile(0);
  for (int64_t step = 1; step <= 3; ++step) {
    profile.begin_step(step, 3);
    EXPECT_FALSE(kernels::op_profiling());
    EXPECT_EQ(profile.end_step(1.0), "");
  }
}

}  // namespace
}  // namespace colrow
