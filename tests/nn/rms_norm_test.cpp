// RMSNorm on every rank of the world (its weight is replicated, so tp does not
// split it): the parameter, forward and backward against the double reference
// (support/norm_reference.h) within fp32 bounds, the same bits on every rank
// with no communication, central finite differences, buffer reuse, and
// configuration errors.
#include "colrow/nn/rms_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "colrow/core/error.h"
#include "nn/layer_test_helpers.h"
#include "nn/same_on_every_rank.h"
#include "support/norm_reference.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using reference::Matrix;
using testing::to_matrix;
using testing::world;

constexpr int64_t kTokens = 12;
constexpr int64_t kD = 48;
constexpr float kEps = 1e-6f;
// Error factors from tests/kernels/cpu/norm_test.cpp (one fp32 rounding per
// step of the kernel, statistics in double): y 4, dx 11, dweight 5.
// expect_within_bound(..., terms = k) allows gamma_k M >= k u M.
constexpr int64_t kY = 4, kDx = 11, kDw = 5;

void expect_within(const std::string& what, const Tensor& got, const Matrix& ref, const Matrix& mag,
                   int64_t roundings) {
  testing::expect_within_bound(what, got, ref, mag, roundings);
}

TEST(RmsNormTest, WeightIsReplicatedOnes) {
  RMSNorm norm("model.layers.0.input_layernorm", kD, kEps, 7);
  const std::vector<Parameter*> params = norm.parameters();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0], &norm.weight());
  EXPECT_EQ(norm.weight().name, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(norm.weight().shard.full_shape, Shape{kD});
  EXPECT_EQ(norm.weight().shard.count, 1) << "must be replicated";
  for (float v : norm.weight().value.to_vector()) EXPECT_EQ(v, 1.0f);
  for (float g : norm.weight().grad.to_vector()) EXPECT_EQ(g, 0.0f);
  EXPECT_EQ(norm.d(), kD);
  EXPECT_EQ(norm.eps(), kEps);
  EXPECT_EQ(RMSNorm("model.norm", kD).eps(), 1e-6f);  // LLaMA's rms_norm_eps
}

// Every rank runs the same replicated inputs and must hold the same bits of
// y, dx and the gradient, without any collective (there is no communicator).
TEST(RmsNormTest, ForwardBackwardMatchReferenceOnEveryRank) {
  Communicator& tp = world();
  RMSNorm norm("model.norm", kD, kEps);
  norm.weight().value.copy_from(testing::random_tensor({kD}, 1));
  const Tensor x = testing::random_tensor({kTokens, kD}, 3);
  const Tensor dy = testing::random_tensor({kTokens, kD}, 4);
  const Tensor y = norm.forward(x).clone();
  const Tensor dx = norm.backward(dy).clone();
  const auto ref = reference::rms_norm(to_matrix(x), to_matrix(norm.weight().value), to_matrix(dy),
                                       kTokens, kD, kEps);
  expect_within("y", y, ref.y, ref.y_mag, kY);
  expect_within("dx", dx, ref.dx, ref.dx_mag, kDx);
  expect_within("weight.grad", norm.weight().grad, ref.dgamma, ref.dgamma_mag, kDw);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&y, &dx, &norm.weight().grad}) {
    EXPECT_TRUE(testing::same_on_every_rank(tp, *t)) << "ranks disagree";
  }
  // A second step accumulates the gradient: twice, one more rounding.
  norm.forward(x);
  norm.backward(dy);
  Matrix dw2 = ref.dgamma, dw2_mag = ref.dgamma_mag;
  for (Matrix* m : {&dw2, &dw2_mag}) {
    for (double& v : *m) v *= 2.0;
  }
  expect_within("weight.grad x2", norm.weight().grad, dw2, dw2_mag, kDw + 1);
}

// The layer keeps its buffers: a second step of the same size reuses them.
TEST(RmsNormTest, BuffersAreReusedAcrossSteps) {
  RMSNorm norm("model.norm", kD);
  const Tensor x = testing::random_tensor({kTokens, kD}, 5);
  const float* y = norm.forward(x).data();
  const float* dx = norm.backward(x).data();
  EXPECT_EQ(norm.forward(x).data(), y);
  EXPECT_EQ(norm.backward(x).data(), dx);
}

// Central differences of L = sum(y * g) in double over the layer's fp32
// outputs, for every element of x and weight. The error of each difference is
// bounded by
//  - rounding: each fp32 evaluation of L errs by at most E = sum |g| kY u M_y;
//    the difference divides two such errors by 2h: E / h (doubled: M_y moves a
//    little with the perturbation);
//  - truncation: h^2/6 L''' + O(h^4), estimated on the double reference forward
//    by Richardson, 4/3 |D(h) - D(h/2)|, and doubled;
//  - the backward's own rounding, kDx u M_dx (kDw for the weight).
// Step h = 2^-6: x +- h is exact for these inputs (multiples of 2^-23 in [-1, 1)).
TEST(RmsNormTest, BackwardMatchesFiniteDifferences) {
  constexpr int64_t kT = 2, kSmallD = 6;
  constexpr float kStep = 0x1p-6f;
  RMSNorm norm("norm", kSmallD, kEps);
  norm.weight().value.copy_from(testing::random_tensor({kSmallD}, 11));
  Tensor x = testing::random_tensor({kT, kSmallD}, 13);
  const Tensor g = testing::random_tensor({kT, kSmallD}, 14);
  Tensor& w = norm.weight().value;
  norm.forward(x);
  const Tensor dx = norm.backward(g).clone();

  auto layer_loss = [&] {
    const Tensor& y = norm.forward(x);
    double sum = 0.0;
    for (int64_t i = 0; i < y.numel(); ++i) sum += static_cast<double>(y.data()[i]) * g.data()[i];
    return sum;
  };
  const Matrix gm = to_matrix(g);
  auto reference_loss = [&](const Matrix& xm, const Matrix& wm) {
    const auto r = reference::rms_norm(xm, wm, gm, kT, kSmallD, kEps);
    double sum = 0.0;
    for (size_t i = 0; i < r.y.size(); ++i) sum += r.y[i] * gm[i];
    return sum;
  };
  const auto ref = reference::rms_norm(to_matrix(x), to_matrix(w), gm, kT, kSmallD, kEps);
  double e = 0.0;
  for (size_t i = 0; i < gm.size(); ++i)
    e += std::fabs(gm[i]) * reference::gamma(kY) * ref.y_mag[i];
  const double rounding = 2.0 * e / kStep;

  // which: 0 = x, 1 = weight.
  auto check = [&](int which, Tensor& t, const Tensor& analytic, const Matrix& mag,
                   int64_t roundings, const char* name) {
    for (int64_t i = 0; i < t.numel(); ++i) {
      float& v = t.data()[i];
      const float original = v;
      v = original + kStep;
      const double plus = layer_loss();
      v = original - kStep;
      const double minus = layer_loss();
      v = original;
      const double fd = (plus - minus) / (2.0 * kStep);
      auto difference = [&](double h) {
        Matrix m[2] = {to_matrix(x), to_matrix(w)};
        m[which][i] = original + h;
        const double lp = reference_loss(m[0], m[1]);
        m[which][i] = original - h;
        const double lm = reference_loss(m[0], m[1]);
        return (lp - lm) / (2.0 * h);
      };
      const double truncation =
          2.0 * 4.0 / 3.0 * std::fabs(difference(kStep) - difference(kStep / 2));
      const double tol = rounding + truncation + reference::gamma(roundings) * mag[i];
      EXPECT_NEAR(analytic.data()[i], fd, tol) << name << "[" << i << "]";
    }
  };
  check(0, x, dx, ref.dx_mag, kDx, "dx");
  check(1, w, norm.weight().grad, ref.dgamma_mag, kDw, "weight.grad");
}

template <typename Fn>
void expect_error(Fn&& fn, const std::string& expected) {
  try {
    fn();
    ADD_FAILURE() << "no ConfigError; expected: " << expected;
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), expected);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ConfigError, got: " << e.what();
  }
}

// Pure checks in the constructor: every rank throws the same message and
// nothing waits in a collective.
TEST(RmsNormTest, InvalidSizesAreConfigErrorsOnEveryRank) {
  expect_error([] { RMSNorm norm("model.norm", 0); },
               "[rms_norm] model.norm.d (0) must be positive.");
  expect_error([] { RMSNorm norm("model.norm", 8, -0.5f); },
               "[rms_norm] model.norm.eps (-0.5) must be finite and >= 0. Use 1e-6 or 1e-5 (the "
               "model's rms_norm_eps).");
  expect_error([] { RMSNorm norm("model.norm", 8, INFINITY); },
               "[rms_norm] model.norm.eps (inf) must be finite and >= 0. Use 1e-6 or 1e-5 (the "
               "model's rms_norm_eps).");
  world().barrier();  // every rank got here
}

TEST(RmsNormTest, MismatchedShapesAreInternalErrors) {
  RMSNorm norm("model.norm", kD);
  EXPECT_THROW(norm.forward(Tensor::zeros({kTokens, kD - 1})), InternalError);
  norm.forward(Tensor::zeros({kTokens, kD}));
  EXPECT_THROW(norm.backward(Tensor::zeros({kTokens - 1, kD})), InternalError);
  // The fused residual add checks the same way.
  Tensor sum = Tensor::zeros({kTokens, kD}), dx = Tensor::zeros({kTokens, kD});
  EXPECT_THROW(norm.forward_add(Tensor::zeros({kTokens, kD - 1}), sum, sum), InternalError);
  norm.forward_add(Tensor::zeros({kTokens, kD}), Tensor::zeros({kTokens, kD}), sum);
  EXPECT_THROW(norm.backward_add(Tensor::zeros({kTokens - 1, kD}), dx, dx), InternalError);
}

}  // namespace
}  // namespace colrow
