// ColumnParallelLinear at tp = world size against the unsharded double
// reference (support/reference.h): output, dx and each rank's weight/bias
// shard within fp32 error bounds, bitwise with small integers; central finite
// differences; the exact collective sequence; divisibility errors.
#include <gtest/gtest.h>

#include "colrow/core/error.h"
#include "colrow/dist/recording_communicator.h"
#include "colrow/nn/column_parallel_linear.h"
#include "kernels/ops.h"
#include "nn/layer_test_helpers.h"
#include "support/reference.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using reference::Matrix;
using testing::block;
using testing::expect_bitwise;
using testing::expect_within_bound;
using testing::to_matrix;
using testing::world;

// Divisible by 1, 2, 3 and 4, so every registered world size shards evenly.
constexpr int64_t kTokens = 6;
constexpr int64_t kIn = 24;
constexpr int64_t kOut = 36;

LinearSpec make_spec(bool bias, int64_t in = kIn, int64_t out = kOut) {
  LinearSpec spec;
  spec.name = "h.0.mlp.c_fc";
  spec.in_features = in;
  spec.out_features = out;
  spec.bias = bias;
  spec.seed = 20240611;
  return spec;
}

std::string describe(bool bias, bool gather_output) {
  return std::string(bias ? "bias" : "no bias") + (gather_output ? ", gather_output" : "");
}

// The full weight and bias, gathered from the shards; checked against what
// fill_shard makes on one rank, so the shards also sit where they should.
struct FullLinear {
  Matrix w, b;
};
FullLinear gather_full(Communicator& tp, ColumnParallelLinear& layer) {
  const LinearSpec& spec = layer.spec();
  const Tensor w = testing::gather_shards(tp, layer.weight().value, 0);
  EXPECT_TRUE(testing::same_bits(
      w, testing::full_parameter(spec.name + ".weight", {spec.out_features, spec.in_features},
                                 spec.resolved_weight_init(), spec.seed)));
  FullLinear full{to_matrix(w), {}};
  if (layer.bias()) {
    const Tensor b = testing::gather_shards(tp, layer.bias()->value, 0);
    EXPECT_TRUE(
        testing::same_bits(b, testing::full_parameter(spec.name + ".bias", {spec.out_features},
                                                      spec.resolved_bias_init(), spec.seed)));
    full.b = to_matrix(b);
  }
  return full;
}

// Error bounds (reference.h): each fp32 result is a sum of K rounded terms, so
// |got - exact| <= gamma_K * M, M the same sum over magnitudes:
//   y  = x W^T + b   K = in + 1 (the bias add is one more rounding)
//   dx = dy W        K = out    (split over ranks, then all-reduced: still out terms)
//   dW = dy^T x      K = tokens
//   db = sum_t dy    K = tokens
// After n backward calls the gradient is a sum of n such sums: K = n * tokens
// against n times the magnitude.
TEST(ColumnParallelLinearTest, MatchesReference) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  for (bool bias : {true, false}) {
    for (bool gather_output : {false, true}) {
      SCOPED_TRACE(describe(bias, gather_output));
      ColumnParallelLinear layer(tp, make_spec(bias), gather_output);
      const FullLinear full = gather_full(tp, layer);
      const Tensor x = testing::random_tensor({kTokens, kIn}, 1);
      const Tensor dy_full = testing::random_tensor({kTokens, kOut}, 2);
      // Without gather_output, the caller's dy is sharded like y.
      const Tensor dy = gather_output ? dy_full : dy_full.shard(1, tp_rank, tp_size).clone();

      const Tensor y = layer.forward(x).clone();
      const Tensor dx = layer.backward(dy).clone();

      const Matrix xm = to_matrix(x), dym = to_matrix(dy_full);
      const Matrix y_ref = reference::linear_forward(xm, full.w, full.b, kTokens, kIn, kOut);
      const Matrix y_mag = reference::linear_forward(reference::abs(xm), reference::abs(full.w),
                                                     reference::abs(full.b), kTokens, kIn, kOut);
      const auto g = reference::linear_backward(xm, full.w, dym, bias, kTokens, kIn, kOut);
      const auto g_mag = reference::linear_backward(reference::abs(xm), reference::abs(full.w),
                                                    reference::abs(dym), bias, kTokens, kIn, kOut);

      if (gather_output) {
        expect_within_bound("y", y, y_ref, y_mag, kIn + 1);
      } else {
        expect_within_bound("y_local", y, block(y_ref, kTokens, kOut, 1, tp_rank, tp_size),
                            block(y_mag, kTokens, kOut, 1, tp_rank, tp_size), kIn + 1);
      }
      expect_within_bound("dx", dx, g.dx, g_mag.dx, kOut);
      expect_within_bound("dW shard", layer.weight().grad,
                          block(g.dw, kOut, kIn, 0, tp_rank, tp_size),
                          block(g_mag.dw, kOut, kIn, 0, tp_rank, tp_size), kTokens);
      if (bias) {
        expect_within_bound("db shard", layer.bias()->grad,
                            block(g.db, 1, kOut, 1, tp_rank, tp_size),
                            block(g_mag.db, 1, kOut, 1, tp_rank, tp_size), kTokens);
      }
    }
  }
}

TEST(ColumnParallelLinearTest, SecondBackwardDoublesTheGradients) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  ColumnParallelLinear layer(tp, make_spec(/*bias=*/true));
  const FullLinear full = gather_full(tp, layer);
  const Tensor x = testing::random_tensor({kTokens, kIn}, 3);
  const Tensor dy_full = testing::random_tensor({kTokens, kOut}, 4);
  const Tensor dy = dy_full.shard(1, tp_rank, tp_size).clone();
  layer.forward(x);
  layer.backward(dy);
  const Tensor dx = layer.backward(dy).clone();

  const Matrix xm = to_matrix(x), dym = to_matrix(dy_full);
  const auto g = reference::linear_backward(xm, full.w, dym, true, kTokens, kIn, kOut);
  const auto g_mag = reference::linear_backward(reference::abs(xm), reference::abs(full.w),
                                                reference::abs(dym), true, kTokens, kIn, kOut);
  auto twice = [](Matrix m) {
    for (double& v : m) v *= 2.0;
    return m;
  };
  // dx is returned, not accumulated: the same as after one call.
  expect_within_bound("dx", dx, g.dx, g_mag.dx, kOut);
  expect_within_bound("2 dW shard", layer.weight().grad,
                      block(twice(g.dw), kOut, kIn, 0, tp_rank, tp_size),
                      block(twice(g_mag.dw), kOut, kIn, 0, tp_rank, tp_size), 2 * kTokens);
  expect_within_bound("2 db shard", layer.bias()->grad,
                      block(twice(g.db), 1, kOut, 1, tp_rank, tp_size),
                      block(twice(g_mag.db), 1, kOut, 1, tp_rank, tp_size), 2 * kTokens);
}

// forward_gelu: the same output() as forward (the pre-activation, which
// backward reads) and the tanh GELU of it in `activation`, bit for bit what
// ops::gelu_forward gives; refused where the layer gathers its output.
TEST(ColumnParallelLinearTest, ForwardGeluKeepsThePreActivationAndWritesTheGelu) {
  Communicator& tp = world();
  for (bool bias : {true, false}) {
    ColumnParallelLinear layer(tp, make_spec(bias));
    const Tensor x = testing::random_tensor({kTokens, kIn}, 7);
    const Tensor plain = layer.forward(x).clone();
    Tensor activation = Tensor::empty({kTokens, layer.out_features_local()});
    EXPECT_EQ(&layer.forward_gelu(x, activation), &activation);
    expect_bitwise("pre-activation", layer.output(), to_matrix(plain));
    Tensor want = Tensor::empty(activation.shape());
    ops::gelu_forward(ops::GeluForm::kTanh, plain, want);
    expect_bitwise("activation", activation, to_matrix(want));
  }
  ColumnParallelLinear gathering(tp, make_spec(true), /*gather_output=*/true);
  Tensor activation = Tensor::empty({kTokens, kOut});
  EXPECT_THROW(gathering.forward_gelu(testing::random_tensor({kTokens, kIn}, 8), activation),
               InternalError);
}

// Integers in {-3..3} \ {0}: every product and partial sum (|sum| <= 24*9+3 for
// y, 36*9 for dx, 6*9 for dW) is an integer far below 2^24, so fp32 is exact in
// any summation order, split or not. The result must then be bitwise the
// reference, hence bitwise the same at tp = 1, 2, 3, 4.
TEST(ColumnParallelLinearTest, SmallIntegersAreBitwiseExact) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  for (bool bias : {true, false}) {
    for (bool gather_output : {false, true}) {
      SCOPED_TRACE(describe(bias, gather_output));
      ColumnParallelLinear layer(tp, make_spec(bias), gather_output);
      const Tensor w = testing::small_int_tensor({kOut, kIn}, 10);
      const Tensor b = testing::small_int_tensor({kOut}, 11);
      layer.weight().value.copy_from(w.shard(0, tp_rank, tp_size));
      if (bias) layer.bias()->value.copy_from(b.shard(0, tp_rank, tp_size));
      const Tensor x = testing::small_int_tensor({kTokens, kIn}, 12);
      const Tensor dy_full = testing::small_int_tensor({kTokens, kOut}, 13);
      const Tensor dy = gather_output ? dy_full : dy_full.shard(1, tp_rank, tp_size).clone();

      const Tensor y = layer.forward(x).clone();
      const Tensor dx = layer.backward(dy).clone();

      const Matrix wm = to_matrix(w), bm = bias ? to_matrix(b) : Matrix{};
      const Matrix y_ref = reference::linear_forward(to_matrix(x), wm, bm, kTokens, kIn, kOut);
      auto g = reference::linear_backward(to_matrix(x), wm, to_matrix(dy_full), bias, kTokens, kIn,
                                          kOut);
      expect_bitwise("y", y,
                     gather_output ? y_ref : block(y_ref, kTokens, kOut, 1, tp_rank, tp_size));
      expect_bitwise("dx", dx, g.dx);
      expect_bitwise("dW shard", layer.weight().grad, block(g.dw, kOut, kIn, 0, tp_rank, tp_size));
      if (bias) {
        expect_bitwise("db shard", layer.bias()->grad, block(g.db, 1, kOut, 1, tp_rank, tp_size));
      }
      // A second backward adds exactly as much again.
      layer.backward(dy);
      for (double& v : g.dw) v *= 2.0;
      for (double& v : g.db) v *= 2.0;
      expect_bitwise("2 dW shard", layer.weight().grad,
                     block(g.dw, kOut, kIn, 0, tp_rank, tp_size));
      if (bias) {
        expect_bitwise("2 db shard", layer.bias()->grad, block(g.db, 1, kOut, 1, tp_rank, tp_size));
      }
    }
  }
}

// Central differences of L = sum over tp of sum(y_local * g_local), g fixed,
// against the layer's own backward (run with dy = g). L is linear in x and
// linear in W, so a central difference has no truncation error at all: only
// the rounding of the two fp32 forwards remains, which a large step shrinks.
// Step h = 0.5 (a power of two, so x +- h is exact for these inputs; the step
// actually applied is still taken as the difference of the stored floats).
// Each evaluation of L is off by at most E = gamma_{in+1} sum |g| M_y, M_y the
// magnitude forward with every |x|, |W|, |b| grown by h (covering any one
// perturbation); the products y*g and their sum are exact or ~1e-16 in double.
// So |fd - exact| <= 2 E / (2h), and the backward's own value is within
// gamma_K M of exact (K = out for dx, tokens for dW and db).
TEST(ColumnParallelLinearTest, BackwardMatchesFiniteDifferences) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  constexpr int64_t kT = 2, kI = 3, kO = 12;
  constexpr float kStep = 0.5f;
  ColumnParallelLinear layer(tp, make_spec(/*bias=*/true, kI, kO));
  const FullLinear full = gather_full(tp, layer);
  Tensor x = testing::random_tensor({kT, kI}, 21);
  const Tensor g_full = testing::random_tensor({kT, kO}, 22);
  const Tensor g = g_full.shard(1, tp_rank, tp_size).clone();

  auto loss = [&]() {
    const Tensor& y = layer.forward(x);
    double local = 0.0;
    for (int64_t t = 0; t < kT; ++t) {
      for (int64_t j = 0; j < y.size(1); ++j) local += static_cast<double>(y(t, j)) * g(t, j);
    }
    return testing::tp_sum(tp, local);
  };

  layer.forward(x);
  const Tensor dx = layer.backward(g).clone();
  const Tensor dw = layer.weight().grad.clone();
  const Tensor db = layer.bias()->grad.clone();

  // The bound E on the rounding error of one evaluation of L.
  auto grown = [&](const Matrix& m) {
    Matrix out = reference::abs(m);
    for (double& v : out) v += kStep;
    return out;
  };
  const Matrix y_mag =
      reference::linear_forward(grown(to_matrix(x)), grown(full.w), grown(full.b), kT, kI, kO);
  const Matrix gm = to_matrix(g_full);
  double loss_error = 0.0;
  for (size_t i = 0; i < gm.size(); ++i) loss_error += std::fabs(gm[i]) * y_mag[i];
  loss_error *= reference::gamma(kI + 1);
  const auto back_mag = reference::linear_backward(
      reference::abs(to_matrix(x)), reference::abs(full.w), reference::abs(gm), true, kT, kI, kO);

  // Perturbs `value` by +-h, evaluating L on every rank (the forward has a
  // collective); `active` says whether this rank holds the perturbed element.
  auto central_difference = [&](float& value, bool active) {
    const float original = value;
    const float plus = original + kStep, minus = original - kStep;
    if (active) value = plus;
    const double l_plus = loss();
    if (active) value = minus;
    const double l_minus = loss();
    value = original;
    return (l_plus - l_minus) / (static_cast<double>(plus) - minus);
  };
  const double fd_error = loss_error / kStep;

  // x is replicated: perturb it on every rank at once.
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double fd = central_difference(x.data()[i], true);
    EXPECT_NEAR(dx.data()[i], fd, fd_error + reference::gamma(kO) * back_mag.dx[i])
        << "dx[" << i << "]";
  }
  // W and b are sharded: perturb one element of one rank's shard at a time.
  for (int r = 0; r < tp_size; ++r) {
    for (int64_t i = 0; i < dw.numel(); ++i) {
      const double fd = central_difference(layer.weight().value.data()[i], r == tp_rank);
      const int64_t full_index = r * dw.numel() + i;  // rows r*out/tp.. of [out, in]
      if (r == tp_rank) {
        EXPECT_NEAR(dw.data()[i], fd, fd_error + reference::gamma(kT) * back_mag.dw[full_index])
            << "dW[" << full_index << "]";
      }
    }
    for (int64_t i = 0; i < db.numel(); ++i) {
      const double fd = central_difference(layer.bias()->value.data()[i], r == tp_rank);
      const int64_t full_index = r * db.numel() + i;
      if (r == tp_rank) {
        EXPECT_NEAR(db.data()[i], fd, fd_error + reference::gamma(kT) * back_mag.db[full_index])
            << "db[" << full_index << "]";
      }
    }
  }
}

// Forward: nothing (the input is replicated) or, with gather_output, one
// all_gather of this rank's [tokens, out/tp]. Backward: one all_reduce_sum of
// dx, [tokens, in]. The same at every tp: the size-1 shortcut belongs to the
// communicator (STYLE.md), which the recording wrapper sits in front of.
TEST(ColumnParallelLinearTest, IssuesExactlyTheExpectedCollectives) {
  RecordingCommunicator tp(world());
  const int tp_rank = tp.rank(), tp_size = tp.size();
  for (bool gather_output : {false, true}) {
    SCOPED_TRACE(describe(true, gather_output));
    ColumnParallelLinear layer(tp, make_spec(/*bias=*/true), gather_output);
    EXPECT_TRUE(tp.events().empty()) << "construction communicates";
    const Tensor x = testing::random_tensor({kTokens, kIn}, 5);
    const Tensor dy_full = testing::random_tensor({kTokens, kOut}, 6);
    const Tensor dy = gather_output ? dy_full : dy_full.shard(1, tp_rank, tp_size).clone();

    tp.clear();
    layer.forward(x);
    std::vector<CollectiveEvent> expected_forward;
    if (gather_output) expected_forward.push_back({"all_gather", kTokens * kOut / tp_size, 0.0});
    EXPECT_EQ(tp.events(), expected_forward) << "forward";

    tp.clear();
    layer.backward(dy);
    const std::vector<CollectiveEvent> expected_backward{{"all_reduce_sum", kTokens * kIn, 0.0}};
    EXPECT_EQ(tp.events(), expected_backward) << "backward";

    // backward_input and backward_weights leave the reduction to the caller.
    tp.clear();
    Tensor dx_partial = Tensor::zeros({kTokens, kIn});
    layer.backward_input(dy, dx_partial, /*accumulate=*/false);
    layer.backward_weights(dy);
    EXPECT_TRUE(tp.events().empty()) << "backward_input, backward_weights";
    tp.clear();
  }
}

// Every rank throws the same ConfigError from the constructor, before any
// parameter exists and before any collective, so nothing can hang.
TEST(ColumnParallelLinearTest, OutFeaturesNotDivisibleByTpIsAConfigError) {
  Communicator& tp = world();
  if (tp.size() == 1) GTEST_SKIP() << "every size is divisible by tp = 1";
  const BadSize* bad = bad_size_for(tp.size());
  if (bad == nullptr) GTEST_SKIP() << "no bad size listed for tp = " << tp.size();
  const std::string expected = "[column_parallel_linear] h.0.mlp.c_fc.out_features (" +
                               std::to_string(bad->value) + ") must be divisible by tp (" +
                               std::to_string(tp.size()) + "). Choose tp in " + bad->choices + ".";
  for (bool gather_output : {false, true}) {
    try {
      ColumnParallelLinear layer(tp, make_spec(true, kIn, bad->value), gather_output);
      ADD_FAILURE() << "no ConfigError for out_features " << bad->value;
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "expected ConfigError, got: " << e.what();
    }
  }
  // The in_features of a column-parallel layer is never split: any size is fine.
  ColumnParallelLinear odd_input(tp, make_spec(true, kIn + 1, kOut));
  EXPECT_EQ(odd_input.weight().value.shape(), (Shape{kOut / tp.size(), kIn + 1}));
  tp.barrier();  // every rank got here
}

}  // namespace
}  // namespace colrow
