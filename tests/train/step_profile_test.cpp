// StepProfile: which steps are profiled (the first is skipped when another
// follows), and a report, once, after the last one, with per-step averages.
#include "train/step_profile.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

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
  EXPECT_NE(report.find("untimed (host, idle)"), std::string::npos);
  // Each row's rate: the products' for the GEMMs, the bytes' for the add.
  for (const char* op : {"\n  gemm ", "\n  add "}) {
    const size_t at = report.find(op), end = report.find('\n', at + 1);
    ASSERT_NE(at, std::string::npos) << op;
    const std::string line = report.substr(at + 1, end - at - 1);
    EXPECT_NE(line.find(op[3] == 'g' ? "FLOP/s" : "GB/s"), std::string::npos) << line;
  }
}

// The gemm row's rate is 2 m n k over its time: read both back from the
// printed row (ms to 0.01 of a few ms, the rate to 0.1 GFLOP/s: 2% covers
// the printing).
TEST(StepProfile, TheGemmRateIsItsFlopsOverItsTime) {
  kernels::take_op_times();
  StepProfile profile(1);
  profile.begin_step(1, 1);
  Tensor a = Tensor::full({512, 512}, 1.0f), c = Tensor::empty({512, 512});
  ops::gemm(kernels::Trans::kNo, kernels::Trans::kNo, 1.0f, a, a, 0.0f, c);
  const std::string report = profile.end_step(100.0);
  const size_t at = report.find("\n  gemm ", report.find("operation"));
  ASSERT_NE(at, std::string::npos) << report;
  double calls = 0.0, ms = 0.0, share = 0.0, rate = 0.0;
  char unit[16] = {};
  ASSERT_EQ(std::sscanf(report.c_str() + at, " gemm %lf %lf %lf%% %lf %15s", &calls, &ms, &share,
                        &rate, unit),
            5)
      << report;
  ASSERT_GT(ms, 0.0);
  const double gflops = 2.0 * 512 * 512 * 512 / (ms * 1e-3) / 1e9;
  const double printed = std::string(unit) == "TFLOP/s" ? rate * 1e3 : rate;
  EXPECT_EQ(std::string(unit).substr(1), "FLOP/s");
  EXPECT_NEAR(printed, gflops, 0.02 * gflops + 0.1) << report;
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
