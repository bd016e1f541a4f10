// kernels/op_profile: every call through kernels/ops.h is counted and timed
// while profiling is on, nothing while it is off, and each operation falls in
// the phase the --profile report gives it, with the work each call did (its
// products' flops, its operands' bytes) for the report's rates.
#include "kernels/op_profile.h"

#include <gtest/gtest.h>

#include <map>

#include "kernels/ops.h"

namespace colrow {
namespace {

std::map<std::string, kernels::OpTime> by_op(const std::vector<kernels::OpTime>& times) {
  std::map<std::string, kernels::OpTime> m;
  for (const kernels::OpTime& t : times) m[t.op] = t;
  return m;
}

TEST(OpProfile, CountsAndTimesEveryOperationWhileOn) {
  Tensor a = Tensor::full({64, 64}, 0.5f), b = Tensor::full({64, 64}, 0.25f);
  Tensor c = Tensor::empty({64, 64});
  kernels::take_op_times();  // start from nothing
  kernels::set_op_profiling(true);
  ops::gemm(kernels::Trans::kNo, kernels::Trans::kNo, 1.0f, a, b, 0.0f, c);
  ops::gemm(kernels::Trans::kNo, kernels::Trans::kYes, 1.0f, a, b, 0.0f, c);
  ops::add(a, b, c);
  kernels::set_op_profiling(false);
  ops::add(a, b, c);  // not counted
  const auto times = by_op(kernels::take_op_times());
  ASSERT_EQ(times.size(), 2u);
  EXPECT_EQ(times.at("gemm").calls, 2);
  EXPECT_EQ(times.at("add").calls, 1);
  EXPECT_GE(times.at("gemm").ms, 0.0);
  // The work each call did: 2 m n k flops, and every operand's bytes once.
  EXPECT_DOUBLE_EQ(times.at("gemm").work.flops, 2 * (2.0 * 64 * 64 * 64));
  EXPECT_DOUBLE_EQ(times.at("gemm").work.bytes, 2 * (3.0 * 64 * 64 * 4));
  EXPECT_DOUBLE_EQ(times.at("add").work.flops, 0.0);
  EXPECT_DOUBLE_EQ(times.at("add").work.bytes, 3.0 * 64 * 64 * 4);
  EXPECT_FLOAT_EQ(c.data()[0], 0.75f);  // the operations still ran
  EXPECT_TRUE(kernels::take_op_times().empty()) << "take_op_times starts over";
}

// Dividing by 1 (AdamW's average over one replica and one micro-batch) is no
// operation at all: no pass over x, no row in the report; any other divisor is.
TEST(OpProfile, DividingByOneIsNoOperation) {
  Tensor x = Tensor::full({8}, 3.0f);
  kernels::take_op_times();
  kernels::set_op_profiling(true);
  ops::divide(x, 1.0f);
  EXPECT_TRUE(by_op(kernels::take_op_times()).empty());
  EXPECT_FLOAT_EQ(x.data()[0], 3.0f);
  ops::divide(x, 2.0f);
  kernels::set_op_profiling(false);
  EXPECT_EQ(by_op(kernels::take_op_times()).at("divide").calls, 1);
  EXPECT_FLOAT_EQ(x.data()[0], 1.5f);
}

TEST(OpProfile, OffByDefaultRecordsNothing) {
  Tensor a = Tensor::full({4}, 1.0f), c = Tensor::empty({4});
  kernels::take_op_times();
  ASSERT_FALSE(kernels::op_profiling());
  ops::add(a, a, c);
  EXPECT_TRUE(kernels::take_op_times().empty());
}

TEST(OpProfile, PhasesOfTheOperations) {
  EXPECT_EQ(kernels::op_phase("gemm"), "gemm");
  EXPECT_EQ(kernels::op_phase("linear_forward"), "gemm");  // a GEMM with its bias epilogue
  EXPECT_EQ(kernels::op_phase("linear_weight_grads"), "gemm");
  EXPECT_EQ(kernels::op_phase("attention_backward"), "attention");
  EXPECT_EQ(kernels::op_phase("rope_forward"), "attention");
  EXPECT_EQ(kernels::op_phase("cross_entropy_partials"), "loss");
  EXPECT_EQ(kernels::op_phase("adamw_update"), "optimizer");
  EXPECT_EQ(kernels::op_phase("sum_of_squares"), "optimizer");
  EXPECT_EQ(kernels::op_phase("layer_norm_backward"), "norms and elementwise");
  EXPECT_EQ(kernels::op_phase("add_bias"), "norms and elementwise");
  EXPECT_EQ(kernels::op_phase("embedding_forward"), "norms and elementwise");
  EXPECT_EQ(kernels::op_phase("fill_random"), "other");
}

}  // namespace
}  // namespace colrow
