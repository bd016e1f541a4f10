// LayerNorm on every rank of the world (its parameters are replicated, so tp
// does not split it): parameters, forward and backward against the double
// reference (support/norm_reference.h) within fp32 bounds, the same bits on
// every rank with no communication, central finite differences, buffer reuse,
// and configuration errors.
#include "colrow/nn/layer_norm.h"

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
constexpr float kEps = 1e-5f;
// Error factors from tests/kernels/cpu/norm_test.cpp (one fp32 rounding per
// step of the kernel, statistics in double): y 6, dx 15, dgamma 6, dbeta 2.
// expect_within_bound(..., terms = k) allows gamma_k M >= k u M.
constexpr int64_t kY = 6, kDx = 15, kDgamma = 6, kDbeta = 2;

void expect_within(const std::string& what, const Tensor& got, const Matrix& ref, const Matrix& mag,
                   int64_t roundings) {
  testing::expect_within_bound(what, got, ref, mag, roundings);
}

TEST(LayerNormTest, ParametersAreReplicatedOnesAndZeros) {
  LayerNorm ln("h.0.ln_1", kD, kEps, 7);
  const std::vector<Parameter*> params = ln.parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0], &ln.weight());
  EXPECT_EQ(params[1], &ln.bias());
  EXPECT_EQ(ln.weight().name, "h.0.ln_1.weight");
  EXPECT_EQ(ln.bias().name, "h.0.ln_1.bias");
  for (Parameter* p : params) {
    EXPECT_EQ(p->shard.full_shape, Shape{kD});
    EXPECT_EQ(p->shard.count, 1) << p->name << " must be replicated";
    EXPECT_EQ(p->value.shape(), Shape{kD});
    for (float g : p->grad.to_vector()) EXPECT_EQ(g, 0.0f);
  }
  for (float v : ln.weight().value.to_vector()) EXPECT_EQ(v, 1.0f);
  for (float v : ln.bias().value.to_vector()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(ln.d(), kD);
  EXPECT_EQ(ln.eps(), kEps);
}

// Every rank runs the same replicated inputs and must hold the same bits of
// y, dx and both gradients, without any collective (there is no communicator).
TEST(LayerNormTest, ForwardBackwardMatchReferenceOnEveryRank) {
  Communicator& tp = world();
  LayerNorm ln("ln_f", kD, kEps);
  ln.weight().value.copy_from(testing::random_tensor({kD}, 1));
  ln.bias().value.copy_from(testing::random_tensor({kD}, 2));
  const Tensor x = testing::random_tensor({kTokens, kD}, 3);
  const Tensor dy = testing::random_tensor({kTokens, kD}, 4);
  const Tensor y = ln.forward(x).clone();
  const Tensor dx = ln.backward(dy).clone();
  const auto ref =
      reference::layer_norm(to_matrix(x), to_matrix(ln.weight().value), to_matrix(ln.bias().value),
                            to_matrix(dy), kTokens, kD, kEps);
  expect_within("y", y, ref.y, ref.y_mag, kY);
  expect_within("dx", dx, ref.dx, ref.dx_mag, kDx);
  expect_within("weight.grad", ln.weight().grad, ref.dgamma, ref.dgamma_mag, kDgamma);
  expect_within("bias.grad", ln.bias().grad, ref.dbeta, ref.dbeta_mag, kDbeta);
  for (const Tensor* t :
       std::initializer_list<const Tensor*>{&y, &dx, &ln.weight().grad, &ln.bias().grad}) {
    EXPECT_TRUE(testing::same_on_every_rank(tp, *t)) << "ranks disagree";
  }
  // A second step accumulates the gradients: twice, one more rounding.
  ln.forward(x);
  ln.backward(dy);
  Matrix dg2 = ref.dgamma, dg2_mag = ref.dgamma_mag, db2 = ref.dbeta, db2_mag = ref.dbeta_mag;
  for (Matrix* m : {&dg2, &dg2_mag, &db2, &db2_mag}) {
    for (double& v : *m) v *= 2.0;
  }
  expect_within("weight.grad x2", ln.weight().grad, dg2, dg2_mag, kDgamma + 1);
  expect_within("bias.grad x2", ln.bias().grad, db2, db2_mag, kDbeta + 1);
}

// The layer keeps its buffers: a second step of the same size reuses them.
TEST(LayerNormTest, BuffersAreReusedAcrossSteps) {
  LayerNorm ln("ln_f", kD);
  const Tensor x = testing::random_tensor({kTokens, kD}, 5);
  const float* y = ln.forward(x).data();
  const float* dx = ln.backward(x).data();
  EXPECT_EQ(ln.forward(x).data(), y);
  EXPECT_EQ(ln.backward(x).data(), dx);
}

// Central differences of L = sum(y * g) in double over the layer's fp32
// outputs, for every element of x, weight and bias. The error of each
// difference is bounded by
//  - rounding: each fp32 evaluation of L errs by at most E = sum |g| kY u M_y;
//    the difference divides two such errors by 2h: E / h (doubled: M_y moves a
//    little with the perturbation);
//  - truncation: h^2/6 L''' + O(h^4), estimated on the double reference forward
//    by Richardson, 4/3 |D(h) - D(h/2)|, and doubled;
//  - the backward's own rounding, kDx u M_dx (kDgamma, kDbeta for the params).
// Step h = 2^-6: x +- h is exact for these inputs (multiples of 2^-23 in [-1, 1)).
TEST(LayerNormTest, BackwardMatchesFiniteDifferences) {
  constexpr int64_t kT = 2, kSmallD = 6;
  constexpr float kStep = 0x1p-6f;
  LayerNorm ln("ln", kSmallD, kEps);
  ln.weight().value.copy_from(testing::random_tensor({kSmallD}, 11));
  ln.bias().value.copy_from(testing::random_tensor({kSmallD}, 12));
  Tensor x = testing::random_tensor({kT, kSmallD}, 13);
  const Tensor g = testing::random_tensor({kT, kSmallD}, 14);
  Tensor& w = ln.weight().value;
  Tensor& b = ln.bias().value;
  ln.forward(x);
  const Tensor dx = ln.backward(g).clone();

  auto layer_loss = [&] {
    const Tensor& y = ln.forward(x);
    double sum = 0.0;
    for (int64_t i = 0; i < y.numel(); ++i) sum += static_cast<double>(y.data()[i]) * g.data()[i];
    return sum;
  };
  const Matrix gm = to_matrix(g);
  auto reference_loss = [&](const Matrix& xm, const Matrix& wm, const Matrix& bm) {
    const auto r = reference::layer_norm(xm, wm, bm, gm, kT, kSmallD, kEps);
    double sum = 0.0;
    for (size_t i = 0; i < r.y.size(); ++i) sum += r.y[i] * gm[i];
    return sum;
  };
  const auto ref =
      reference::layer_norm(to_matrix(x), to_matrix(w), to_matrix(b), gm, kT, kSmallD, kEps);
  double e = 0.0;
  for (size_t i = 0; i < gm.size(); ++i)
    e += std::fabs(gm[i]) * reference::gamma(kY) * ref.y_mag[i];
  const double rounding = 2.0 * e / kStep;

  // tensor: 0 = x, 1 = weight, 2 = bias.
  auto check = [&](int which, Tensor& t, const Tensor& analytic, const Matrix& mag, int64_t factor,
                   const char* name) {
    for (int64_t i = 0; i < t.numel(); ++i) {
      float& v = t.data()[i];
      const float original = v;
      v = original + kStep;
      const double plus = layer_loss();
      v = original - kStep;
      const double minus = layer_loss();
      v = original;
      const double fd = (plus - minus) / (2.0 * kStep);
      auto richardson = [&](double h) {
        Matrix m[3] = {to_matrix(x), to_matrix(w), to_matrix(b)};
        m[which][i] = original + h;
        const double lp = reference_loss(m[0], m[1], m[2]);
        m[which][i] = original - h;
        const double lm = reference_loss(m[0], m[1], m[2]);
        return (lp - lm) / (2.0 * h);
      };
      const double truncation =
          2.0 * 4.0 / 3.0 * std::fabs(richardson(kStep) - richardson(kStep / 2));
      const double tol = rounding + truncation + reference::gamma(factor) * mag[i];
      EXPECT_NEAR(analytic.data()[i], fd, tol) << name << "[" << i << "]";
    }
  };
  check(0, x, dx, ref.dx_mag, kDx, "dx");
  check(1, w, ln.weight().grad, ref.dgamma_mag, kDgamma, "weight.grad");
  check(2, b, ln.bias().grad, ref.dbeta_mag, kDbeta, "bias.grad");
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
TEST(LayerNormTest, InvalidSizesAreConfigErrorsOnEveryRank) {
  expect_error([] { LayerNorm ln("ln_f", 0); }, "[layer_norm] ln_f.d (0) must be positive.");
  expect_error([] { LayerNorm ln("h.3.ln_2", -5); },
               "[layer_norm] h.3.ln_2.d (-5) must be positive.");
  expect_error([] { LayerNorm ln("ln_f", 8, -1.0f); },
               "[layer_norm] ln_f.eps (-1) must be finite and >= 0. Use 1e-5 (GPT-2's "
               "layer_norm_epsilon).");
  expect_error([] { LayerNorm ln("ln_f", 8, NAN); },
               "[layer_norm] ln_f.eps (nan) must be finite and >= 0. Use 1e-5 (GPT-2's "
               "layer_norm_epsilon).");
  world().barrier();  // every rank got here
}

TEST(LayerNormTest, MismatchedShapesAreInternalErrors) {
  LayerNorm ln("ln_f", kD);
  EXPECT_THROW(ln.forward(Tensor::zeros({kTokens, kD + 1})), InternalError);
  EXPECT_THROW(ln.forward(Tensor::zeros({kD})), InternalError);
  ln.forward(Tensor::zeros({kTokens, kD}));
  EXPECT_THROW(ln.backward(Tensor::zeros({kTokens + 1, kD})), InternalError);
  // The fused residual add checks the same way.
  Tensor sum = Tensor::zeros({kTokens, kD}), dx = Tensor::zeros({kTokens, kD});
  EXPECT_THROW(ln.forward_add(Tensor::zeros({kTokens, kD + 1}), sum, sum), InternalError);
  ln.forward_add(Tensor::zeros({kTokens, kD}), Tensor::zeros({kTokens, kD}), sum);
  EXPECT_THROW(ln.backward_add(Tensor::zeros({kTokens + 1, kD}), dx, dx), InternalError);
}

}  // namespace
}  // namespace colrow
