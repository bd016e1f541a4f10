// RowParallelLinear at tp = world size against the unsharded double reference
// (support/reference.h): output, dx (sharded or gathered) and each rank's
// weight shard and replicated bias within fp32 error bounds, bitwise with small
// integers; central finite differences; the exact collective sequence;
// backward from a recomputed input; divisibility errors.
#include <gtest/gtest.h>

#include "colrow/core/error.h"
#include "colrow/dist/recording_communicator.h"
#include "colrow/nn/row_parallel_linear.h"
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

// in is split over tp: divisible by 1, 2, 3 and 4.
constexpr int64_t kTokens = 6;
constexpr int64_t kIn = 36;
constexpr int64_t kOut = 24;

LinearSpec make_spec(bool bias, int64_t in = kIn, int64_t out = kOut) {
  LinearSpec spec;
  spec.name = "h.0.mlp.c_proj";
  spec.in_features = in;
  spec.out_features = out;
  spec.bias = bias;
  spec.seed = 777;
  return spec;
}

std::string describe(bool bias, bool input_is_parallel) {
  return std::string(bias ? "bias" : "no bias") +
         (input_is_parallel ? ", input_is_parallel" : ", input replicated");
}

// The full weight (gathered from column shards) and the replicated bias, both
// checked against what fill_shard makes on one rank.
struct FullLinear {
  Matrix w, b;
};
FullLinear gather_full(Communicator& tp, RowParallelLinear& layer) {
  const LinearSpec& spec = layer.spec();
  const Tensor w = testing::gather_shards(tp, layer.weight().value, 1);
  EXPECT_TRUE(testing::same_bits(
      w, testing::full_parameter(spec.name + ".weight", {spec.out_features, spec.in_features},
                                 spec.resolved_weight_init(), spec.seed)));
  FullLinear full{to_matrix(w), {}};
  if (layer.bias()) {
    EXPECT_TRUE(testing::same_bits(layer.bias()->value,
                                   testing::full_parameter(spec.name + ".bias", {spec.out_features},
                                                           spec.resolved_bias_init(), spec.seed)));
    full.b = to_matrix(layer.bias()->value);
  }
  return full;
}

// Error bounds (reference.h): |got - exact| <= gamma_K * M with
//   y  = x W^T + b   K = in + 1 (partial sums over in/tp, all-reduced, then b)
//   dx = dy W        K = out
//   dW = dy^T x      K = tokens
//   db = sum_t dy    K = tokens (the full db on every rank: dy is replicated)
TEST(RowParallelLinearTest, MatchesReference) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  for (bool bias : {true, false}) {
    for (bool input_is_parallel : {true, false}) {
      SCOPED_TRACE(describe(bias, input_is_parallel));
      RowParallelLinear layer(tp, make_spec(bias), input_is_parallel);
      const FullLinear full = gather_full(tp, layer);
      const Tensor x_full = testing::random_tensor({kTokens, kIn}, 1);
      const Tensor dy = testing::random_tensor({kTokens, kOut}, 2);
      // With input_is_parallel the caller hands over its last-dim slice.
      const Tensor x = input_is_parallel ? x_full.shard(1, tp_rank, tp_size).clone() : x_full;

      const Tensor y = layer.forward(x).clone();
      const Tensor dx = layer.backward(dy).clone();

      const Matrix xm = to_matrix(x_full), dym = to_matrix(dy);
      const Matrix y_ref = reference::linear_forward(xm, full.w, full.b, kTokens, kIn, kOut);
      const Matrix y_mag = reference::linear_forward(reference::abs(xm), reference::abs(full.w),
                                                     reference::abs(full.b), kTokens, kIn, kOut);
      const auto g = reference::linear_backward(xm, full.w, dym, bias, kTokens, kIn, kOut);
      const auto g_mag = reference::linear_backward(reference::abs(xm), reference::abs(full.w),
                                                    reference::abs(dym), bias, kTokens, kIn, kOut);

      expect_within_bound("y", y, y_ref, y_mag, kIn + 1);
      if (input_is_parallel) {
        expect_within_bound("dx_local", dx, block(g.dx, kTokens, kIn, 1, tp_rank, tp_size),
                            block(g_mag.dx, kTokens, kIn, 1, tp_rank, tp_size), kOut);
      } else {
        expect_within_bound("dx", dx, g.dx, g_mag.dx, kOut);
      }
      expect_within_bound("dW shard", layer.weight().grad,
                          block(g.dw, kOut, kIn, 1, tp_rank, tp_size),
                          block(g_mag.dw, kOut, kIn, 1, tp_rank, tp_size), kTokens);
      if (bias) expect_within_bound("db", layer.bias()->grad, g.db, g_mag.db, kTokens);
    }
  }
}

TEST(RowParallelLinearTest, SecondBackwardDoublesTheGradients) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  RowParallelLinear layer(tp, make_spec(/*bias=*/true));
  const FullLinear full = gather_full(tp, layer);
  const Tensor x_full = testing::random_tensor({kTokens, kIn}, 3);
  const Tensor dy = testing::random_tensor({kTokens, kOut}, 4);
  layer.forward(x_full.shard(1, tp_rank, tp_size).clone());
  layer.backward(dy);
  const Tensor dx = layer.backward(dy).clone();

  const Matrix xm = to_matrix(x_full), dym = to_matrix(dy);
  const auto g = reference::linear_backward(xm, full.w, dym, true, kTokens, kIn, kOut);
  const auto g_mag = reference::linear_backward(reference::abs(xm), reference::abs(full.w),
                                                reference::abs(dym), true, kTokens, kIn, kOut);
  auto twice = [](Matrix m) {
    for (double& v : m) v *= 2.0;
    return m;
  };
  // dx is returned, not accumulated: the same as after one call.
  expect_within_bound("dx_local", dx, block(g.dx, kTokens, kIn, 1, tp_rank, tp_size),
                      block(g_mag.dx, kTokens, kIn, 1, tp_rank, tp_size), kOut);
  expect_within_bound("2 dW shard", layer.weight().grad,
                      block(twice(g.dw), kOut, kIn, 1, tp_rank, tp_size),
                      block(twice(g_mag.dw), kOut, kIn, 1, tp_rank, tp_size), 2 * kTokens);
  expect_within_bound("2 db", layer.bias()->grad, twice(g.db), twice(g_mag.db), 2 * kTokens);
}

// backward(dy, x), activation recomputation's: the weight gradient reads the
// x given, not the tensor forward saw, which a later layer may since have
// overwritten (here: zeroed). The same gradients and dx as backward(dy) from
// an intact input, bit for bit. An x of another shape, or a layer that
// scattered its own input, is an InternalError before anything accumulates.
TEST(RowParallelLinearTest, BackwardReadsTheRecomputedInputItIsGiven) {
  Communicator& tp = world();
  const Tensor x_full = testing::random_tensor({kTokens, kIn}, 5);
  const Tensor dy = testing::random_tensor({kTokens, kOut}, 6);
  const Tensor x_local = x_full.shard(1, tp.rank(), tp.size()).clone();
  RowParallelLinear kept(tp, make_spec(/*bias=*/true)), recomputed(tp, make_spec(/*bias=*/true));
  kept.forward(x_local);
  const Tensor dx_kept = kept.backward(dy).clone();
  Tensor buffer = x_local.clone();
  recomputed.forward(buffer);
  buffer.zero();  // the buffer served another layer since
  EXPECT_EQ(recomputed.backward(dy, x_local).to_vector(), dx_kept.to_vector());
  EXPECT_EQ(recomputed.weight().grad.to_vector(), kept.weight().grad.to_vector());
  EXPECT_EQ(recomputed.bias()->grad.to_vector(), kept.bias()->grad.to_vector());

  const std::vector<float> grad_before = recomputed.weight().grad.to_vector();
  const Tensor wrong = Tensor::zeros({kTokens + 1, kIn / tp.size()});
  EXPECT_THROW(recomputed.backward(dy, wrong), InternalError);
  EXPECT_EQ(recomputed.weight().grad.to_vector(), grad_before);
  RowParallelLinear scatters(tp, make_spec(/*bias=*/true), /*input_is_parallel=*/false);
  scatters.forward(x_full);
  EXPECT_THROW(scatters.backward(dy, x_local), InternalError);
}

// Integers in {-3..3} \ {0}: every product and partial sum (|y| <= 36*9+3,
// |dx| <= 24*9, |dW| <= 6*9) is an integer far below 2^24, so fp32 is exact in
// any order and split; the all-reduce adds exact integers too. Bitwise equal
// to the reference, hence bitwise the same at every tp.
TEST(RowParallelLinearTest, SmallIntegersAreBitwiseExact) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  for (bool bias : {true, false}) {
    for (bool input_is_parallel : {true, false}) {
      SCOPED_TRACE(describe(bias, input_is_parallel));
      RowParallelLinear layer(tp, make_spec(bias), input_is_parallel);
      const Tensor w = testing::small_int_tensor({kOut, kIn}, 10);
      const Tensor b = testing::small_int_tensor({kOut}, 11);
      layer.weight().value.copy_from(w.shard(1, tp_rank, tp_size));
      if (bias) layer.bias()->value.copy_from(b);
      const Tensor x_full = testing::small_int_tensor({kTokens, kIn}, 12);
      const Tensor dy = testing::small_int_tensor({kTokens, kOut}, 13);
      const Tensor x = input_is_parallel ? x_full.shard(1, tp_rank, tp_size).clone() : x_full;

      const Tensor y = layer.forward(x).clone();
      const Tensor dx = layer.backward(dy).clone();

      const Matrix wm = to_matrix(w), bm = bias ? to_matrix(b) : Matrix{};
      const Matrix y_ref = reference::linear_forward(to_matrix(x_full), wm, bm, kTokens, kIn, kOut);
      auto g = reference::linear_backward(to_matrix(x_full), wm, to_matrix(dy), bias, kTokens, kIn,
                                          kOut);
      expect_bitwise("y", y, y_ref);
      expect_bitwise("dx", dx,
                     input_is_parallel ? block(g.dx, kTokens, kIn, 1, tp_rank, tp_size) : g.dx);
      expect_bitwise("dW shard", layer.weight().grad, block(g.dw, kOut, kIn, 1, tp_rank, tp_size));
      if (bias) expect_bitwise("db", layer.bias()->grad, g.db);
      // A second backward adds exactly as much again.
      layer.backward(dy);
      for (double& v : g.dw) v *= 2.0;
      for (double& v : g.db) v *= 2.0;
      expect_bitwise("2 dW shard", layer.weight().grad,
                     block(g.dw, kOut, kIn, 1, tp_rank, tp_size));
      if (bias) expect_bitwise("2 db", layer.bias()->grad, g.db);
    }
  }
}

// Central differences of L = sum(y * g), g fixed (y is replicated, so L is the
// same on every rank), against the layer's backward run with dy = g. L is
// linear in x and linear in W, so a central difference has no truncation
// error: only the rounding of the two fp32 forwards remains, and a large step
// shrinks its effect. Step h = 0.5 (a power of two, exact on these inputs; the
// step actually applied is taken from the stored floats anyway). Each
// evaluation of L is off by at most E = gamma_{in+1} sum |g| M_y, M_y the
// magnitude forward with every |x|, |W|, |b| grown by h (covering any one
// perturbation); so |fd - exact| <= 2 E / (2h), and the backward's own value
// is within gamma_K M of exact (K = out for dx, tokens for dW and db).
TEST(RowParallelLinearTest, BackwardMatchesFiniteDifferences) {
  Communicator& tp = world();
  const int tp_rank = tp.rank(), tp_size = tp.size();
  constexpr int64_t kT = 2, kI = 12, kO = 3;
  constexpr float kStep = 0.5f;
  RowParallelLinear layer(tp, make_spec(/*bias=*/true, kI, kO));
  const FullLinear full = gather_full(tp, layer);
  const Tensor x_full = testing::random_tensor({kT, kI}, 21);
  Tensor x = x_full.shard(1, tp_rank, tp_size).clone();
  const Tensor g = testing::random_tensor({kT, kO}, 22);

  auto loss = [&]() {
    const Tensor& y = layer.forward(x);
    double sum = 0.0;
    for (int64_t t = 0; t < kT; ++t) {
      for (int64_t j = 0; j < kO; ++j) sum += static_cast<double>(y(t, j)) * g(t, j);
    }
    return sum;
  };

  layer.forward(x);
  const Tensor dx = layer.backward(g).clone();
  const Tensor dw = layer.weight().grad.clone();
  const Tensor db = layer.bias()->grad.clone();

  auto grown = [&](const Matrix& m) {
    Matrix out = reference::abs(m);
    for (double& v : out) v += kStep;
    return out;
  };
  const Matrix y_mag =
      reference::linear_forward(grown(to_matrix(x_full)), grown(full.w), grown(full.b), kT, kI, kO);
  const Matrix gm = to_matrix(g);
  double loss_error = 0.0;
  for (size_t i = 0; i < gm.size(); ++i) loss_error += std::fabs(gm[i]) * y_mag[i];
  loss_error *= reference::gamma(kI + 1);
  const double fd_error = loss_error / kStep;
  const auto back_mag =
      reference::linear_backward(reference::abs(to_matrix(x_full)), reference::abs(full.w),
                                 reference::abs(gm), true, kT, kI, kO);

  // Perturbs `value` by +-h on the ranks where `active`, evaluating L on every
  // rank (the forward has a collective).
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

  // x and W are sharded on the last dim: perturb one element of one rank's
  // shard at a time. Element (i, j) of a [rows, cols/tp] shard of rank r is
  // (i, r*cols/tp + j) of the full matrix.
  const Matrix mag_dx = back_mag.dx, mag_dw = back_mag.dw;
  for (int r = 0; r < tp_size; ++r) {
    for (int64_t i = 0; i < dx.numel(); ++i) {
      const double fd = central_difference(x.data()[i], r == tp_rank);
      const int64_t row = i / dx.size(1), col = r * dx.size(1) + i % dx.size(1);
      if (r == tp_rank) {
        EXPECT_NEAR(dx.data()[i], fd, fd_error + reference::gamma(kO) * mag_dx[row * kI + col])
            << "dx[" << row << ", " << col << "]";
      }
    }
    for (int64_t i = 0; i < dw.numel(); ++i) {
      const double fd = central_difference(layer.weight().value.data()[i], r == tp_rank);
      const int64_t row = i / dw.size(1), col = r * dw.size(1) + i % dw.size(1);
      if (r == tp_rank) {
        EXPECT_NEAR(dw.data()[i], fd, fd_error + reference::gamma(kT) * mag_dw[row * kI + col])
            << "dW[" << row << ", " << col << "]";
      }
    }
  }
  // The bias is replicated: perturb it on every rank at once.
  for (int64_t i = 0; i < db.numel(); ++i) {
    const double fd = central_difference(layer.bias()->value.data()[i], true);
    EXPECT_NEAR(db.data()[i], fd, fd_error + reference::gamma(kT) * back_mag.db[i])
        << "db[" << i << "]";
  }
}

// Forward: one all_reduce_sum of the partial output, [tokens, out]; the input
// slice is taken locally even when the input is replicated. Backward: nothing,
// or (input replicated) one all_gather of this rank's dx, [tokens, in/tp]. The
// same at every tp: the size-1 shortcut belongs to the communicator (STYLE.md),
// which the recording wrapper sits in front of.
TEST(RowParallelLinearTest, IssuesExactlyTheExpectedCollectives) {
  RecordingCommunicator tp(world());
  const int tp_rank = tp.rank(), tp_size = tp.size();
  for (bool input_is_parallel : {true, false}) {
    SCOPED_TRACE(describe(true, input_is_parallel));
    RowParallelLinear layer(tp, make_spec(/*bias=*/true), input_is_parallel);
    EXPECT_TRUE(tp.events().empty()) << "construction communicates";
    const Tensor x_full = testing::random_tensor({kTokens, kIn}, 5);
    const Tensor x = input_is_parallel ? x_full.shard(1, tp_rank, tp_size).clone() : x_full;
    const Tensor dy = testing::random_tensor({kTokens, kOut}, 6);

    tp.clear();
    layer.forward(x);
    const std::vector<CollectiveEvent> expected_forward{{"all_reduce_sum", kTokens * kOut, 0.0}};
    EXPECT_EQ(tp.events(), expected_forward) << "forward";

    tp.clear();
    layer.backward(dy);
    std::vector<CollectiveEvent> expected_backward;
    if (!input_is_parallel)
      expected_backward.push_back({"all_gather", kTokens * kIn / tp_size, 0.0});
    EXPECT_EQ(tp.events(), expected_backward) << "backward";
    tp.clear();
  }
}

// Every rank throws the same ConfigError from the constructor, before any
// parameter exists and before any collective, so nothing can hang.
TEST(RowParallelLinearTest, InFeaturesNotDivisibleByTpIsAConfigError) {
  Communicator& tp = world();
  if (tp.size() == 1) GTEST_SKIP() << "every size is divisible by tp = 1";
  const BadSize* bad = bad_size_for(tp.size());
  if (bad == nullptr) GTEST_SKIP() << "no bad size listed for tp = " << tp.size();
  const std::string expected = "[row_parallel_linear] h.0.mlp.c_proj.in_features (" +
                               std::to_string(bad->value) + ") must be divisible by tp (" +
                               std::to_string(tp.size()) + "). Choose tp in " + bad->choices + ".";
  for (bool input_is_parallel : {true, false}) {
    try {
      RowParallelLinear layer(tp, make_spec(true, bad->value, kOut), input_is_parallel);
      ADD_FAILURE() << "no ConfigError for in_features " << bad->value;
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "expected ConfigError, got: " << e.what();
    }
  }
  // The out_features of a row-parallel layer is never split: any size is fine.
  RowParallelLinear odd_output(tp, make_spec(true, kIn, kOut + 1));
  EXPECT_EQ(odd_output.weight().value.shape(), (Shape{kOut + 1, kIn / tp.size()}));
  tp.barrier();  // every rank got here
}

}  // namespace
}  // namespace colrow
