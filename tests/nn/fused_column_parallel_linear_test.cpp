// FusedColumnParallelLinear at tp = world size: its parameters are exactly
// the ColumnParallelLinears' of the same parts (names, shards, values); each
// part's block of y, the summed partial dx, and each part's weight and bias
// gradients against the double reference (support/reference.h) on this
// rank's rows, bitwise with small integers and within fp32 bounds on random
// data; a replicated part (attention's KV heads when tp > n_kv_head) among
// split ones; parts that cannot be fused are refused.
#include "colrow/nn/fused_column_parallel_linear.h"

#include <gtest/gtest.h>

#include <memory>

#include "colrow/core/error.h"
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

constexpr int64_t kTokens = 6;
constexpr int64_t kIn = 24;

LinearSpec spec(const std::string& name, int64_t out, bool bias) {
  LinearSpec s;
  s.name = name;
  s.in_features = kIn;
  s.out_features = out;
  s.bias = bias;
  s.seed = 20261129;
  return s;
}

// q split by tp, k split by tp, v replicated whole on every rank (count 1):
// out features divisible by 1, 2, 3 and 4.
std::vector<ColumnPart> parts(Communicator& tp, bool bias) {
  return {{spec("attn.q_proj", 36, bias), {tp.rank(), tp.size()}},
          {spec("attn.k_proj", 12, bias), {tp.rank(), tp.size()}},
          {spec("attn.v_proj", 12, bias), {0, 1}}};
}

// This rank's rows of part `part`'s full [out, kIn] matrix (or [out] vector).
Matrix local_rows(const Matrix& full, const ColumnPart& part, int64_t cols) {
  const int64_t out = part.spec.out_features;
  return block(full, out, cols, 0, part.block.index, part.block.count);
}

TEST(FusedColumnParallelLinearTest, ParametersAreTheColumnParallelLinears) {
  Communicator& tp = world();
  for (bool bias : {true, false}) {
    FusedColumnParallelLinear fused(tp, parts(tp, bias));
    // The weights, then the biases: each group's parts together, in order.
    std::vector<Parameter*> want;
    std::vector<std::unique_ptr<ColumnParallelLinear>> layers;
    for (const ColumnPart& part : parts(tp, bias)) {
      layers.push_back(std::make_unique<ColumnParallelLinear>(tp, part.spec, part.block));
      want.push_back(&layers.back()->weight());
    }
    for (size_t i = 0; bias && i < layers.size(); ++i) want.push_back(layers[i]->bias());
    const std::vector<Parameter*> got = fused.parameters();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i]->name, want[i]->name);
      EXPECT_EQ(got[i]->shard.full_shape, want[i]->shard.full_shape) << got[i]->name;
      EXPECT_EQ(got[i]->shard.index, want[i]->shard.index) << got[i]->name;
      EXPECT_EQ(got[i]->shard.count, want[i]->shard.count) << got[i]->name;
      EXPECT_TRUE(testing::same_bits(got[i]->value, want[i]->value)) << got[i]->name;
    }
    const int64_t cols = 36 / tp.size() + 12 / tp.size() + 12;
    EXPECT_EQ(fused.out_features_local(), cols);
    EXPECT_EQ(fused.weights().value().shape(), (Shape{cols, kIn}));
    EXPECT_EQ(fused.biases() != nullptr, bias);
  }
}

// Integers in {-3..3} \ {0}: every sum (|y| <= 24*9+3, |dx| <= 60*9,
// |dW| <= 2*6*9 after two backward calls) is an integer far below 2^24, so
// fp32 is exact in any order and the results are bitwise the reference.
TEST(FusedColumnParallelLinearTest, SmallIntegersAreBitwiseTheReference) {
  Communicator& tp = world();
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "bias" : "no bias");
    const std::vector<ColumnPart> ps = parts(tp, bias);
    FusedColumnParallelLinear fused(tp, ps);
    const Tensor x = testing::small_int_tensor({kTokens, kIn}, 1);
    std::vector<Matrix> w_local, b_local;
    for (size_t i = 0; i < ps.size(); ++i) {
      const int64_t out = ps[i].spec.out_features;
      const Tensor w = testing::small_int_tensor({out, kIn}, 10 + i);
      const Tensor b = testing::small_int_tensor({out}, 20 + i);
      w_local.push_back(local_rows(to_matrix(w), ps[i], kIn));
      // Written through the part's parameter: the group's storage.
      fused.parameters()[i]->value.copy_from(w.shard(0, ps[i].block.index, ps[i].block.count));
      if (bias) {
        b_local.push_back(local_rows(to_matrix(b), ps[i], 1));
        fused.parameters()[ps.size() + i]->value.copy_from(
            b.shard(0, ps[i].block.index, ps[i].block.count));
      } else {
        b_local.emplace_back();
      }
    }
    const Tensor y = fused.forward(x).clone();
    const Tensor dy = testing::small_int_tensor(y.shape(), 30);
    Tensor dx = Tensor::full({kTokens, kIn}, 1.0f);
    fused.backward_input(dy, dx, /*accumulate=*/true);
    fused.backward_weights(dy);
    fused.backward_weights(dy);

    Matrix dx_ref(static_cast<size_t>(kTokens * kIn), 1.0);  // what accumulate added to
    for (size_t i = 0; i < ps.size(); ++i) {
      SCOPED_TRACE(ps[i].spec.name);
      const int64_t out = fused.part_columns(i);
      const Matrix dy_i = to_matrix(fused.part(dy, i).clone());
      expect_bitwise(
          "y", fused.part(y, i).clone(),
          reference::linear_forward(to_matrix(x), w_local[i], b_local[i], kTokens, kIn, out));
      const auto g =
          reference::linear_backward(to_matrix(x), w_local[i], dy_i, bias, kTokens, kIn, out);
      for (size_t e = 0; e < dx_ref.size(); ++e) dx_ref[e] += g.dx[e];
      Matrix dw2 = g.dw, db2 = g.db;
      for (double& v : dw2) v *= 2.0;
      for (double& v : db2) v *= 2.0;
      const std::vector<Parameter*> params = fused.parameters();
      expect_bitwise("2 dW", params[i]->grad, dw2);
      if (bias) expect_bitwise("2 db", params[ps.size() + i]->grad, db2);
    }
    expect_bitwise("dx, partial, accumulated", dx, dx_ref);
  }
}

// Random data: each result within the fp32 bound of its sum (reference.h):
//   y  K = in + 1;   dx  K = all parts' local columns;   dW, db  K = tokens.
TEST(FusedColumnParallelLinearTest, RandomDataIsWithinFp32BoundsOfTheReference) {
  Communicator& tp = world();
  const std::vector<ColumnPart> ps = parts(tp, /*bias=*/true);
  FusedColumnParallelLinear fused(tp, ps);
  const std::vector<Parameter*> params = fused.parameters();
  const Tensor x = testing::random_tensor({kTokens, kIn}, 2);
  const Tensor y = fused.forward(x).clone();
  const Tensor dy = testing::random_tensor(y.shape(), 3);
  Tensor dx = Tensor::empty({kTokens, kIn});
  fused.backward_input(dy, dx, /*accumulate=*/false);
  fused.backward_weights(dy);
  Matrix dx_ref(static_cast<size_t>(kTokens * kIn), 0.0), dx_mag = dx_ref;
  const Matrix xm = to_matrix(x);
  for (size_t i = 0; i < ps.size(); ++i) {
    SCOPED_TRACE(ps[i].spec.name);
    const int64_t out = fused.part_columns(i);
    const Matrix w = to_matrix(params[i]->value), b = to_matrix(params[ps.size() + i]->value);
    const Matrix dy_i = to_matrix(fused.part(dy, i).clone());
    expect_within_bound("y", fused.part(y, i).clone(),
                        reference::linear_forward(xm, w, b, kTokens, kIn, out),
                        reference::linear_forward(reference::abs(xm), reference::abs(w),
                                                  reference::abs(b), kTokens, kIn, out),
                        kIn + 1);
    const auto g = reference::linear_backward(xm, w, dy_i, true, kTokens, kIn, out);
    const auto g_mag = reference::linear_backward(reference::abs(xm), reference::abs(w),
                                                  reference::abs(dy_i), true, kTokens, kIn, out);
    for (size_t e = 0; e < dx_ref.size(); ++e) {
      dx_ref[e] += g.dx[e];
      dx_mag[e] += g_mag.dx[e];
    }
    expect_within_bound("dW", params[i]->grad, g.dw, g_mag.dw, kTokens);
    expect_within_bound("db", params[ps.size() + i]->grad, g.db, g_mag.db, kTokens);
  }
  expect_within_bound("dx, partial", dx, dx_ref, dx_mag, fused.out_features_local());
}

TEST(FusedColumnParallelLinearTest, PartsThatCannotBeFusedAreRefused) {
  Communicator& tp = world();
  const OutputBlock mine{tp.rank(), tp.size()};
  LinearSpec other_input = spec("b", 12, true);
  other_input.in_features = kIn + 1;
  EXPECT_THROW(FusedColumnParallelLinear(tp, {{spec("a", 12, true), mine}, {other_input, mine}}),
               InternalError)
      << "two inputs";
  EXPECT_THROW(
      FusedColumnParallelLinear(tp, {{spec("a", 12, true), mine}, {spec("b", 12, false), mine}}),
      InternalError)
      << "one bias";
  EXPECT_THROW(FusedColumnParallelLinear(tp, {}), InternalError);
  if (tp.size() > 1) {
    // 12 * tp + 1 rows never split evenly over tp: ColumnParallelLinear's ConfigError.
    EXPECT_THROW(FusedColumnParallelLinear(tp, {{spec("a", 12 * tp.size() + 1, true), mine}}),
                 ConfigError);
  }
  FusedColumnParallelLinear fused(tp, parts(tp, true));
  EXPECT_THROW(fused.part(Tensor::zeros({2, 5}), 0), InternalError) << "not the output's width";
  EXPECT_THROW(fused.part(Tensor::zeros({2, fused.out_features_local()}), 3), InternalError);
}

}  // namespace
}  // namespace colrow
