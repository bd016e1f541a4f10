// COLROW_INJECT_FAULT: its syntax, the errors of a bad entry, and that a
// gradient fault or an error fires on its step and rank only. (The kills are proven
// end to end by tests/cli/train_faults_test.sh.)
#include "colrow/train/injected_faults.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "colrow/core/error.h"

namespace colrow {
namespace {

std::string error_of(const std::string& spec) {
  try {
    parse_injected_faults(spec);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(InjectedFaults, ParsesEveryKindStepAndRank) {
  EXPECT_TRUE(parse_injected_faults("").empty());
  const std::vector<InjectedFault> f = parse_injected_faults(
      "kill-in-step@3:1,kill-in-save@2,nan-grad@7:12,inf-grad@1:0,error-in-step@4:2");
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[0].kind, FaultKind::kKillInStep);
  EXPECT_EQ(f[0].step, 3);
  EXPECT_EQ(f[0].rank, 1);
  EXPECT_EQ(f[1].kind, FaultKind::kKillInSave);
  EXPECT_EQ(f[1].rank, 0);  // the default
  EXPECT_EQ(f[2].kind, FaultKind::kNanGrad);
  EXPECT_EQ(f[2].step, 7);
  EXPECT_EQ(f[2].rank, 12);
  EXPECT_EQ(f[3].kind, FaultKind::kInfGrad);
  EXPECT_EQ(f[4].kind, FaultKind::kErrorInStep);
}

TEST(InjectedFaults, BadEntriesAreRefusedByName) {
  EXPECT_NE(error_of("kill@3").find("entry (kill@3) names no known fault"), std::string::npos);
  EXPECT_NE(error_of("nan-grad").find("has no @STEP"), std::string::npos);
  EXPECT_NE(error_of("nan-grad@0").find("step >= 1"), std::string::npos);
  EXPECT_NE(error_of("nan-grad@x").find("step >= 1"), std::string::npos);
  EXPECT_NE(error_of("nan-grad@2:-1").find("rank >= 0"), std::string::npos);
  EXPECT_NE(error_of("nan-grad@2:").find("rank >= 0"), std::string::npos);
  EXPECT_NE(error_of("nan-gradient@2").find("names no known fault"), std::string::npos);
  EXPECT_NE(error_of("kill-in-step@3,oops").find("entry (oops)"), std::string::npos);
  EXPECT_NE(error_of("oops").find("Write KIND@STEP[:RANK]"), std::string::npos);
  EXPECT_EQ(error_of("nan-grad@1"), "no error");
}

TEST(InjectedFaults, GradientFaultsFireOnTheirStepAndRankOnly) {
  Parameter p("w", ShardSpec::replicated({2, 3}), Init::zeros(), 0);
  const std::vector<Parameter*> params{&p};
  const FaultInjector on_rank_1(parse_injected_faults("nan-grad@3:1,inf-grad@5:1"), 1);
  const FaultInjector on_rank_0(parse_injected_faults("nan-grad@3:1"), 0);
  on_rank_0.poison_gradient_if_due(3, params);  // another rank's fault
  on_rank_1.poison_gradient_if_due(2, params);  // another step
  for (float g : p.grad.to_vector()) EXPECT_EQ(g, 0.0f);
  on_rank_1.poison_gradient_if_due(3, params);
  EXPECT_TRUE(std::isnan(p.grad.to_vector()[0]));
  p.zero_grad();
  on_rank_1.poison_gradient_if_due(5, params);
  EXPECT_TRUE(std::isinf(p.grad.to_vector()[0]));
  for (size_t i = 1; i < 6; ++i) EXPECT_EQ(p.grad.to_vector()[i], 0.0f);
  FaultInjector().kill_if_due(FaultKind::kKillInStep, 1);  // no faults: nothing happens
  on_rank_0.kill_if_due(FaultKind::kKillInStep, 3);        // another rank's
}

}  // namespace
}  // namespace colrow
