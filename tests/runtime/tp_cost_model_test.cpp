// The tensor-parallel MLP cost model against hand calculations (the numbers
// chosen so every step is exact in binary), its derivation from first
// principles (FLOPs over the GEMM rate, bus floats over the bus bandwidth),
// the unit conversions, the within-25% aim check, R = 1 and bad inputs.
#include "colrow/runtime/tp_cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "colrow/core/error.h"

namespace colrow {
namespace {

template <typename Fn>
std::string message_of(Fn fn) {
  try {
    fn();
  } catch (const InvalidInputError& e) {
    return e.what();
  }
  return "(no error)";
}

// 100 GFLOP/s of GEMM = 50 GMAC/s; 10 GB/s of bus bandwidth = 2.5 Gfloat/s.
constexpr double kMacs = 50e9;
constexpr double kFloats = 2.5e9;

TEST(TpCostModelTest, RatioMatchesHandCalculation) {
  // R = 2, d = 1024: (2-1)/1024 * 50e9 / (4 * 2.5e9) = 1/1024 * 5 = 0.0048828125
  EXPECT_DOUBLE_EQ(predicted_comm_compute_ratio(2, 1024, kMacs, kFloats), 0.0048828125);
  // R = 4, d = 256: (4-1)/256 * 5 = 15/256 = 0.05859375
  EXPECT_DOUBLE_EQ(predicted_comm_compute_ratio(4, 256, kMacs, kFloats), 0.05859375);
  // R = 8, d = 64, lambda_compute 1e9 MAC/s, lambda_comm 1e9 floats/s:
  // 7/64 * 1 / 4 = 7/256 = 0.02734375
  EXPECT_DOUBLE_EQ(predicted_comm_compute_ratio(8, 64, 1e9, 1e9), 0.02734375);
}

TEST(TpCostModelTest, MacsAndTrafficMatchHandCalculation) {
  // T = 2048, d = 1024, R = 2: 8 * 2048 * 1024^2 / 2 = 8,589,934,592 MACs
  // (up: 2048 x 1024 x 2048 = 4,294,967,296; down the same).
  EXPECT_DOUBLE_EQ(tp_mlp_forward_macs(2048, 1024, 2), 8589934592.0);
  // = forward_flops / R / 2 with forward_flops = 2 GEMMs * 2 * T * d * 4d.
  EXPECT_DOUBLE_EQ(tp_mlp_forward_macs(2048, 1024, 2), 2 * 2.0 * 2048 * 1024 * 4096 / 2 / 2);
  // All-reduce of T d = 2,097,152 floats over 4 ranks: 2 * 3/4 * 2,097,152 = 3,145,728.
  EXPECT_DOUBLE_EQ(ring_all_reduce_floats(2048 * 1024, 4), 3145728.0);
  EXPECT_DOUBLE_EQ(ring_all_reduce_floats(2048 * 1024, 1), 0.0);
}

// The closed form is (bus floats / lambda_comm) / (MACs / lambda_compute) for
// any tokens: the token count cancels.
TEST(TpCostModelTest, RatioIsTimeOverTimeFromFirstPrinciples) {
  for (int tp : {1, 2, 3, 4, 8}) {
    for (int64_t d : {64, 768, 4096}) {
      for (int64_t tokens : {1, 37, 2048}) {
        const double t_compute = tp_mlp_forward_macs(tokens, d, tp) / kMacs;
        const double t_comm = ring_all_reduce_floats(tokens * d, tp) / kFloats;
        EXPECT_NEAR(predicted_comm_compute_ratio(tp, d, kMacs, kFloats), t_comm / t_compute,
                    1e-12 * (t_comm / t_compute) + 1e-300)
            << "tp " << tp << " d " << d << " tokens " << tokens;
      }
    }
  }
}

TEST(TpCostModelTest, OneRankPredictsNoCommunication) {
  EXPECT_EQ(predicted_comm_compute_ratio(1, 512, kMacs, kFloats), 0.0);
  // lambda_comm cannot be measured on one rank: it is not read at R = 1.
  EXPECT_EQ(predicted_comm_compute_ratio(1, 512, kMacs, 0.0), 0.0);
  EXPECT_EQ(all_reduce_bus_floats_per_second(1000, 1, 1e-3), 0.0);
}

TEST(TpCostModelTest, UnitConversions) {
  EXPECT_DOUBLE_EQ(macs_from_flops(100e9), 50e9);
  EXPECT_DOUBLE_EQ(flops_from_macs(50e9), 100e9);
  EXPECT_DOUBLE_EQ(floats_from_bytes(10e9), 2.5e9);
  EXPECT_DOUBLE_EQ(bytes_from_floats(2.5e9), 10e9);
  // nccl-tests: 1,048,576 floats over 2 ranks in 1 ms: busbw = 2 * 1/2 * 1,048,576 / 1e-3
  // = 1,048,576,000 floats/s (4.194304 GB/s).
  EXPECT_DOUBLE_EQ(all_reduce_bus_floats_per_second(1 << 20, 2, 1e-3), 1048576000.0);
  // The same ratio in FLOP/s and bytes/s: (R-1)/d * flops / (8 * floats) = ... / (2 * bytes).
  const double flops = flops_from_macs(kMacs), bytes = bytes_from_floats(kFloats);
  EXPECT_DOUBLE_EQ(predicted_comm_compute_ratio(4, 256, kMacs, kFloats),
                   3.0 / 256 * flops / (2.0 * bytes));
}

TEST(TpCostModelTest, AimCountsOnlyCommunicationAboveFivePercent) {
  // measured ratio = t_comm / t_compute.
  const std::vector<TpProfilePoint> points = {
      {1.0, 0.01, 0.02},   // 1% comm: not counted, however far off
      {1.0, 0.05, 0.06},   // 5% exactly: counted; 0.06 / 0.05 = 1.2 -> within
      {1.0, 0.10, 0.125},  // 0.125 / 0.10 = 1.25 -> within (the edge)
      {1.0, 0.10, 0.126},  // 1.26 -> outside
      {2.0, 1.00, 0.375},  // measured 0.5, 0.375 / 0.5 = 0.75 -> within (the lower edge)
      {2.0, 1.00, 0.37},   // 0.74 -> outside
  };
  const TpAimSummary s = summarize_tp_aim(points);
  EXPECT_EQ(s.counted, 5);
  EXPECT_EQ(s.within, 3);
  EXPECT_FALSE(s.holds());
  EXPECT_TRUE(summarize_tp_aim({points[0], points[1], points[2]}).holds());
  EXPECT_TRUE(summarize_tp_aim({}).holds());  // nothing counted: nothing contradicts
  EXPECT_FALSE(tp_point_counts({1.0, 0.049, 0.0}));
  EXPECT_TRUE(tp_point_within({1.0, 0.0, 0.0}));  // R = 1: both zero
}

TEST(TpCostModelTest, BadInputsNameTheValueAndTheRule) {
  EXPECT_NE(message_of([] {
              predicted_comm_compute_ratio(0, 512, kMacs, kFloats);
            }).find("[tp-model] tp (0) must be at least 1."),
            std::string::npos);
  EXPECT_NE(message_of([] {
              predicted_comm_compute_ratio(2, 0, kMacs, kFloats);
            }).find("d_model (0) must be at least 1."),
            std::string::npos);
  EXPECT_NE(message_of([] {
              predicted_comm_compute_ratio(2, 512, -1.0, kFloats);
            }).find("lambda_compute (MAC/s) (-1) must be positive and finite."),
            std::string::npos);
  EXPECT_NE(message_of([] {
              predicted_comm_compute_ratio(2, 512, kMacs, 0.0);
            }).find("lambda_comm (floats/s) (0) must be positive and finite."),
            std::string::npos);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_THROW(predicted_comm_compute_ratio(2, 512, nan, kFloats), InvalidInputError);
  EXPECT_THROW(predicted_comm_compute_ratio(2, 512, kMacs, inf), InvalidInputError);
  EXPECT_THROW(predicted_comm_compute_ratio(1, 512, 0.0, kFloats), InvalidInputError);
  EXPECT_THROW(tp_mlp_forward_macs(0, 512, 2), InvalidInputError);
  EXPECT_THROW(ring_all_reduce_floats(-1, 2), InvalidInputError);
  EXPECT_THROW(ring_all_reduce_floats(16, 0), InvalidInputError);
  EXPECT_THROW(all_reduce_bus_floats_per_second(16, 2, 0.0), InvalidInputError);
  EXPECT_NE(message_of([] {
              tp_point_counts({0.0, 1.0, 0.5});
            }).find("t_compute (s) (0) must be positive and finite."),
            std::string::npos);
  EXPECT_THROW(tp_point_counts({1.0, -1.0, 0.5}), InvalidInputError);
  EXPECT_THROW(tp_point_counts({1.0, 1.0, nan}), InvalidInputError);
  EXPECT_THROW(summarize_tp_aim({{1.0, 0.5, -0.1}}), InvalidInputError);
}

}  // namespace
}  // namespace colrow
