// layer_norm_* and rms_norm_* kernels against the double reference
// (support/norm_reference.h): outputs, statistics, dx and accumulated parameter
// gradients within fp32 error bounds, over shapes around the 64-wide gradient
// blocks and past 2^15 elements (the OpenMP path), strided rows, a constant
// row, a large mean offset (the two-pass variance), zero tokens, and
// InternalError on mismatched shapes; the fused residual add against the
// separate add and norm, bit for bit. Finite differences are in the layer tests.
#include "kernels/cpu/norm.h"
#include "kernels/cpu/residual.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "nn/layer_test_helpers.h"
#include "support/norm_reference.h"

namespace colrow {
namespace {

namespace cpu = kernels::cpu;
using reference::Matrix;
using testing::to_matrix;

constexpr double kU = reference::kUnitRoundoff;

// Error factors c in |got - exact| <= c u M (M from norm_reference.h). Row sums
// are accumulated in double, so they add no gamma_d growth; what is left is a
// handful of fp32 roundings, each relative to a term bounded by M, plus the
// fp32 rounding of mean (u |mean|, the |mean| in xa) and of rstd (u):
//   y  = ((x - m) r) gamma + beta:         x - m, * r, r's rounding, * gamma, + beta -> 5
//   dx = r (g - mean(g) - xhat mean(g xhat)): g, xhat (3), mean(g xhat) (5),
//        the product, two subtractions, * r and r's rounding            -> 14
//   dgamma: dy * xhat with xhat's 3 and the product's 1, the final fp32 rounding -> 5
//   dbeta: the final fp32 rounding of an exact double sum               -> 1
// RMSNorm has no mean: y 3, dx 10, dweight 4. Each gets one spare rounding
// (O(u^2) terms and the addition of a second accumulated call).
constexpr double kLnY = 6, kLnDx = 15, kLnDgamma = 6, kLnDbeta = 2;
constexpr double kRmsY = 4, kRmsDx = 11, kRmsDw = 5;

void expect_within(const std::string& what, const Tensor& got, const Matrix& ref, const Matrix& mag,
                   double factor) {
  const std::vector<float> g = got.to_vector();
  ASSERT_EQ(g.size(), ref.size()) << what;
  int64_t bad = 0, worst = 0;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::fabs(g[i] - ref[i]), bound = factor * kU * mag[i];
    if (!(err <= bound)) ++bad;
    const double ratio = bound > 0 ? err / bound : (err > 0 ? INFINITY : 0.0);
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = static_cast<int64_t>(i);
  }
  EXPECT_EQ(bad, 0) << what << ": worst at " << worst << ": got " << g[worst] << ", reference "
                    << ref[worst] << ", error/bound " << worst_ratio;
}

Matrix scaled(const Matrix& m, double s) {
  Matrix out = m;
  for (double& v : out) v *= s;
  return out;
}

// Shapes: tiny, around the 64-feature gradient blocks, and two past 2^15 elements.
struct Dims {
  int64_t tokens, d;
};
const Dims kDims[] = {{1, 1}, {3, 5}, {4, 63}, {4, 64}, {5, 65}, {7, 130}, {64, 1000}, {40, 1031}};

// x uniform in [-1, 1) plus `offset`; row 0 constant when `constant_row`.
Tensor make_input(const Dims& dims, uint64_t seed, float offset, bool constant_row) {
  Tensor x = testing::random_tensor({dims.tokens, dims.d}, seed);
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] += offset;
  if (constant_row) {
    for (int64_t j = 0; j < dims.d; ++j) x(0, j) = offset + 0.25f;
  }
  return x;
}

struct Case {
  float offset;
  bool constant_row;
  const char* name;
};
const Case kCases[] = {
    {0.0f, false, "centered"}, {0.0f, true, "constant row"}, {100.0f, false, "offset 100"}};

TEST(NormKernelTest, LayerNormMatchesReference) {
  const float eps = 1e-5f;
  for (const Case& c : kCases) {
    for (const Dims& dims : kDims) {
      SCOPED_TRACE(std::string(c.name) + " [" + std::to_string(dims.tokens) + ", " +
                   std::to_string(dims.d) + "]");
      const Tensor x = make_input(dims, 1, c.offset, c.constant_row);
      const Tensor gamma = testing::random_tensor({dims.d}, 2);
      const Tensor beta = testing::random_tensor({dims.d}, 3);
      const Tensor dy = testing::random_tensor({dims.tokens, dims.d}, 4);
      Tensor y = Tensor::empty({dims.tokens, dims.d}), dx = Tensor::empty({dims.tokens, dims.d});
      Tensor mean = Tensor::empty({dims.tokens}), rstd = Tensor::empty({dims.tokens});
      Tensor dgamma = Tensor::zeros({dims.d}), dbeta = Tensor::zeros({dims.d});
      cpu::layer_norm_forward(x, gamma, beta, eps, y, mean, rstd);
      cpu::layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
      const auto ref = reference::layer_norm(to_matrix(x), to_matrix(gamma), to_matrix(beta),
                                             to_matrix(dy), dims.tokens, dims.d, eps);
      // mean and rstd: one fp32 rounding of a double-accurate value (2: spare).
      Matrix abs_mean = ref.mean;
      for (double& v : abs_mean) v = std::fabs(v);
      expect_within("mean", mean, ref.mean, abs_mean, 2);
      expect_within("rstd", rstd, ref.rstd, ref.rstd, 2);
      expect_within("y", y, ref.y, ref.y_mag, kLnY);
      expect_within("dx", dx, ref.dx, ref.dx_mag, kLnDx);
      expect_within("dgamma", dgamma, ref.dgamma, ref.dgamma_mag, kLnDgamma);
      expect_within("dbeta", dbeta, ref.dbeta, ref.dbeta_mag, kLnDbeta);
      // A second backward accumulates: twice the gradients, one more rounding.
      cpu::layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
      expect_within("dgamma x2", dgamma, scaled(ref.dgamma, 2), scaled(ref.dgamma_mag, 2),
                    kLnDgamma + 1);
      expect_within("dbeta x2", dbeta, scaled(ref.dbeta, 2), scaled(ref.dbeta_mag, 2),
                    kLnDbeta + 1);
    }
  }
}

TEST(NormKernelTest, RmsNormMatchesReference) {
  const float eps = 1e-6f;
  for (const Case& c : kCases) {
    for (const Dims& dims : kDims) {
      SCOPED_TRACE(std::string(c.name) + " [" + std::to_string(dims.tokens) + ", " +
                   std::to_string(dims.d) + "]");
      const Tensor x = make_input(dims, 5, c.offset, c.constant_row);
      const Tensor weight = testing::random_tensor({dims.d}, 6);
      const Tensor dy = testing::random_tensor({dims.tokens, dims.d}, 7);
      Tensor y = Tensor::empty({dims.tokens, dims.d}), dx = Tensor::empty({dims.tokens, dims.d});
      Tensor rstd = Tensor::empty({dims.tokens});
      Tensor dweight = Tensor::zeros({dims.d});
      cpu::rms_norm_forward(x, weight, eps, y, rstd);
      cpu::rms_norm_backward(x, weight, rstd, dy, dx, dweight);
      const auto ref = reference::rms_norm(to_matrix(x), to_matrix(weight), to_matrix(dy),
                                           dims.tokens, dims.d, eps);
      expect_within("rstd", rstd, ref.rstd, ref.rstd, 2);
      expect_within("y", y, ref.y, ref.y_mag, kRmsY);
      expect_within("dx", dx, ref.dx, ref.dx_mag, kRmsDx);
      expect_within("dweight", dweight, ref.dgamma, ref.dgamma_mag, kRmsDw);
      cpu::rms_norm_backward(x, weight, rstd, dy, dx, dweight);
      expect_within("dweight x2", dweight, scaled(ref.dgamma, 2), scaled(ref.dgamma_mag, 2),
                    kRmsDw + 1);
    }
  }
}

// A one-pass fp32 variance (E[x^2] - E[x]^2) at offset 1000 and spread 2^-10
// loses every digit; the two-pass double statistics keep rstd to fp32 rounding.
TEST(NormKernelTest, VarianceSurvivesALargeOffset) {
  constexpr int64_t kTokens = 3, kD = 96;
  Tensor x = testing::random_tensor({kTokens, kD}, 8);
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = 1000.0f + x.data()[i] * 0x1p-10f;
  const Tensor gamma = Tensor::full({kD}, 1.0f), beta = Tensor::zeros({kD});
  Tensor y = Tensor::empty({kTokens, kD}), mean = Tensor::empty({kTokens});
  Tensor rstd = Tensor::empty({kTokens});
  cpu::layer_norm_forward(x, gamma, beta, 0.0f, y, mean, rstd);
  const auto ref = reference::layer_norm(to_matrix(x), to_matrix(gamma), to_matrix(beta),
                                         to_matrix(y), kTokens, kD, 0.0);
  expect_within("rstd", rstd, ref.rstd, ref.rstd, 2);
}

// x and y as column blocks of wider matrices (row stride > d).
TEST(NormKernelTest, StridedRows) {
  constexpr int64_t kTokens = 6, kD = 70, kWide = 100;
  const Tensor wide_x = testing::random_tensor({kTokens, kWide}, 9);
  const Tensor wide_dy = testing::random_tensor({kTokens, kWide}, 10);
  Tensor wide_y = Tensor::zeros({kTokens, kWide}), wide_dx = Tensor::zeros({kTokens, kWide});
  const Tensor x = wide_x.slice(1, 20, kD), dy = wide_dy.slice(1, 5, kD);
  Tensor y = wide_y.slice(1, 25, kD), dx = wide_dx.slice(1, 10, kD);
  const Tensor gamma = testing::random_tensor({kD}, 11), beta = testing::random_tensor({kD}, 12);
  Tensor mean = Tensor::empty({kTokens}), rstd = Tensor::empty({kTokens});
  Tensor dgamma = Tensor::zeros({kD}), dbeta = Tensor::zeros({kD});
  cpu::layer_norm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
  cpu::layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  const auto ref = reference::layer_norm(to_matrix(x), to_matrix(gamma), to_matrix(beta),
                                         to_matrix(dy), kTokens, kD, 1e-5f);
  expect_within("y", y, ref.y, ref.y_mag, kLnY);
  expect_within("dx", dx, ref.dx, ref.dx_mag, kLnDx);
  expect_within("dgamma", dgamma, ref.dgamma, ref.dgamma_mag, kLnDgamma);
  // Nothing outside the views was written.
  EXPECT_EQ(wide_y(0, 24), 0.0f);
  EXPECT_EQ(wide_y(kTokens - 1, 25 + kD), 0.0f);
  EXPECT_EQ(wide_dx(0, 9), 0.0f);

  Tensor rms_y = wide_y.slice(1, 0, kD), rms_dx = wide_dx.slice(1, 0, kD);
  Tensor dweight = Tensor::zeros({kD});
  cpu::rms_norm_forward(x, gamma, 1e-6f, rms_y, rstd);
  cpu::rms_norm_backward(x, gamma, rstd, dy, rms_dx, dweight);
  const auto rms =
      reference::rms_norm(to_matrix(x), to_matrix(gamma), to_matrix(dy), kTokens, kD, 1e-6f);
  expect_within("rms y", rms_y, rms.y, rms.y_mag, kRmsY);
  expect_within("rms dx", rms_dx, rms.dx, rms.dx_mag, kRmsDx);
  expect_within("rms dweight", dweight, rms.dgamma, rms.dgamma_mag, kRmsDw);
}

// The residual add fused into the norm's pass (norm.h) against the separate
// add (residual.h) and norm, bit for bit, in fp32 and bf16 (where the sum is
// rounded before the statistics see it, and dx twice): forward's sum, y and
// statistics, backward's dx and parameter gradients. The fused side reads and
// writes column blocks of wider matrices (row stride > d).
TEST(NormKernelTest, FusedResidualAddGivesTheSeparateAddsBits) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Dims& dims : kDims) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " [" + std::to_string(dims.tokens) + ", " +
                   std::to_string(dims.d) + "]");
      const int64_t t = dims.tokens, d = dims.d, wide = d + 9;
      const Tensor x = testing::random_tensor({t, d}, 21).to(dtype);
      const Tensor residual = make_input(dims, 22, 3.0f, false).to(dtype);
      const Tensor dy = testing::random_tensor({t, d}, 23).to(dtype);
      const Tensor dresidual = testing::random_tensor({t, d}, 24).to(dtype);
      const Tensor gamma = testing::random_tensor({d}, 25).to(dtype);
      const Tensor beta = testing::random_tensor({d}, 26).to(dtype);
      // Strided copies of the fused side's operands.
      Tensor wide_residual = Tensor::zeros({t, wide}).to(dtype);
      Tensor wide_sum = Tensor::zeros({t, wide}).to(dtype);
      Tensor wide_dresidual = Tensor::zeros({t, wide}).to(dtype);
      Tensor residual_view = wide_residual.slice(1, 4, d), sum = wide_sum.slice(1, 7, d);
      Tensor dresidual_view = wide_dresidual.slice(1, 2, d);
      residual_view.copy_from(residual);
      dresidual_view.copy_from(dresidual);

      Tensor separate_sum = Tensor::empty({t, d}).to(dtype);
      cpu::add(x, residual, separate_sum);
      for (bool layer : {true, false}) {
        SCOPED_TRACE(layer ? "LayerNorm" : "RMSNorm");
        Tensor y1 = Tensor::empty({t, d}).to(dtype), y2 = Tensor::empty({t, d}).to(dtype);
        Tensor mean1 = Tensor::empty({t}), mean2 = Tensor::empty({t});
        Tensor rstd1 = Tensor::empty({t}), rstd2 = Tensor::empty({t});
        Tensor norm_dx = Tensor::empty({t, d}).to(dtype), dx1 = Tensor::empty({t, d}).to(dtype);
        Tensor dx2 = Tensor::empty({t, d}).to(dtype);
        Tensor dg1 = Tensor::zeros({d}), dg2 = Tensor::zeros({d});
        Tensor db1 = Tensor::zeros({d}), db2 = Tensor::zeros({d});
        if (layer) {
          cpu::layer_norm_forward(separate_sum, gamma, beta, 1e-5f, y1, mean1, rstd1);
          cpu::layer_norm_forward(x, gamma, beta, 1e-5f, y2, mean2, rstd2, &residual_view, &sum);
          cpu::layer_norm_backward(separate_sum, gamma, mean1, rstd1, dy, norm_dx, dg1, db1);
          cpu::layer_norm_backward(sum, gamma, mean2, rstd2, dy, dx2, dg2, db2, &dresidual_view);
        } else {
          cpu::rms_norm_forward(separate_sum, gamma, 1e-6f, y1, rstd1);
          cpu::rms_norm_forward(x, gamma, 1e-6f, y2, rstd2, &residual_view, &sum);
          cpu::rms_norm_backward(separate_sum, gamma, rstd1, dy, norm_dx, dg1);
          cpu::rms_norm_backward(sum, gamma, rstd2, dy, dx2, dg2, &dresidual_view);
        }
        cpu::add(dresidual, norm_dx, dx1);
        EXPECT_EQ(sum.to_vector(), separate_sum.to_vector());
        EXPECT_EQ(y2.to_vector(), y1.to_vector());
        EXPECT_EQ(rstd2.to_vector(), rstd1.to_vector());
        if (layer) {
          EXPECT_EQ(mean2.to_vector(), mean1.to_vector());
        }
        EXPECT_EQ(dx2.to_vector(), dx1.to_vector());
        EXPECT_EQ(dg2.to_vector(), dg1.to_vector());
        EXPECT_EQ(db2.to_vector(), db1.to_vector());
      }
      // Nothing outside the sum's view was written.
      EXPECT_EQ(wide_sum.slice(1, 0, 7).to_vector(), std::vector<float>(t * 7, 0.0f));
      EXPECT_EQ(wide_sum.slice(1, 7 + d, 2).to_vector(), std::vector<float>(t * 2, 0.0f));
    }
  }
}

TEST(NormKernelTest, AResidualWithoutItsSumIsAnInternalError) {
  const Tensor x = Tensor::zeros({4, 8}), gamma = Tensor::zeros({8}), beta = Tensor::zeros({8});
  Tensor y = Tensor::empty({4, 8}), mean = Tensor::empty({4}), rstd = Tensor::empty({4});
  Tensor sum = Tensor::empty({4, 8}), bad_sum = Tensor::empty({4, 7});
  EXPECT_THROW(cpu::layer_norm_forward(x, gamma, beta, 1e-5f, y, mean, rstd, &x, nullptr),
               InternalError);
  EXPECT_THROW(cpu::rms_norm_forward(x, gamma, 1e-5f, y, rstd, nullptr, &sum), InternalError);
  EXPECT_THROW(cpu::rms_norm_forward(x, gamma, 1e-5f, y, rstd, &x, &bad_sum), InternalError);
  Tensor dx = Tensor::empty({4, 8}), dgamma = Tensor::zeros({8});
  const Tensor bad_dresidual = Tensor::zeros({3, 8});
  EXPECT_THROW(cpu::rms_norm_backward(x, gamma, rstd, x, dx, dgamma, &bad_dresidual),
               InternalError);
}

TEST(NormKernelTest, ZeroTokensIsANoOp) {
  const Tensor x = Tensor::empty({0, 8}), gamma = Tensor::full({8}, 1.0f);
  const Tensor beta = Tensor::zeros({8});
  Tensor y = Tensor::empty({0, 8}), dx = Tensor::empty({0, 8});
  Tensor mean = Tensor::empty({0}), rstd = Tensor::empty({0});
  Tensor dgamma = Tensor::full({8}, 3.0f), dbeta = Tensor::full({8}, 3.0f);
  cpu::layer_norm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
  cpu::layer_norm_backward(x, gamma, mean, rstd, x, dx, dgamma, dbeta);
  cpu::rms_norm_forward(x, gamma, 1e-5f, y, rstd);
  cpu::rms_norm_backward(x, gamma, rstd, x, dx, dgamma);
  for (float v : dgamma.to_vector()) EXPECT_EQ(v, 3.0f);
  for (float v : dbeta.to_vector()) EXPECT_EQ(v, 3.0f);
}

TEST(NormKernelTest, MismatchedShapesAreInternalErrors) {
  const Tensor x = Tensor::zeros({4, 8}), gamma = Tensor::zeros({8}), beta = Tensor::zeros({8});
  Tensor y = Tensor::empty({4, 8}), mean = Tensor::empty({4}), rstd = Tensor::empty({4});
  Tensor bad_y = Tensor::empty({4, 7}), bad_gamma = Tensor::zeros({7}),
         bad_rstd = Tensor::empty({3});
  EXPECT_THROW(cpu::layer_norm_forward(x, gamma, beta, 1e-5f, bad_y, mean, rstd), InternalError);
  EXPECT_THROW(cpu::layer_norm_forward(x, bad_gamma, beta, 1e-5f, y, mean, rstd), InternalError);
  EXPECT_THROW(cpu::layer_norm_forward(x, gamma, beta, 1e-5f, y, mean, bad_rstd), InternalError);
  EXPECT_THROW(cpu::rms_norm_forward(x, bad_gamma, 1e-5f, y, rstd), InternalError);
  EXPECT_THROW(cpu::rms_norm_forward(Tensor::zeros({32}), gamma, 1e-5f, y, rstd), InternalError);
  try {
    cpu::rms_norm_forward(x, gamma, 1e-5f, bad_y, rstd);
    ADD_FAILURE() << "no InternalError";
  } catch (const InternalError& e) {
    EXPECT_EQ(std::string(e.what()),
              "[norm] rms_norm_forward: y [4, 7] must be [4, 8] with contiguous rows");
  }
}

}  // namespace
}  // namespace colrow
