// TP-invariant initialization (parameter.h): at tp = world size, every rank's
// shard of a column- or row-parallel weight or bias, gathered over tp, is
// bitwise the tensor fill_shard makes on one rank for the same (seed, name),
// so the model is the same at every tp. Also: names and seeds select distinct
// streams, and Init::linear_default takes the full (unsharded) fan-in.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "colrow/core/bfloat16.h"
#include "colrow/nn/column_parallel_linear.h"
#include "colrow/nn/parameter.h"
#include "colrow/nn/row_parallel_linear.h"
#include "nn/layer_test_helpers.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using testing::full_parameter;
using testing::gather_shards;
using testing::same_bits;
using testing::world;

constexpr int64_t kIn = 24;
constexpr int64_t kOut = 36;

LinearSpec spec_with(const std::string& name, const Init& init, uint64_t seed) {
  LinearSpec spec;
  spec.name = name;
  spec.in_features = kIn;
  spec.out_features = kOut;
  spec.bias = true;
  spec.seed = seed;
  spec.weight_init = init;
  spec.bias_init = init;
  return spec;
}

// Inits whose draws depend on the element index (zeros/ones trivially agree).
std::vector<Init> random_inits() {
  return {Init::normal(0.02f), Init::uniform(0.1f)};
}

TEST(ParameterTest, ColumnParallelShardsGatherToTheFullTensor) {
  Communicator& tp = world();
  for (const Init& init : random_inits()) {
    SCOPED_TRACE(init.kind == Init::Kind::kNormal ? "normal" : "uniform");
    const LinearSpec spec = spec_with("h.0.mlp.c_fc", init, 1234);
    ColumnParallelLinear layer(tp, spec);
    // Placement: rows r*out/tp .. (r+1)*out/tp of the weight and bias.
    EXPECT_EQ(layer.weight().shard.dim, 0);
    EXPECT_EQ(layer.weight().shard.index, tp.rank());
    EXPECT_EQ(layer.weight().shard.count, tp.size());
    EXPECT_EQ(layer.weight().value.shape(), (Shape{kOut / tp.size(), kIn}));
    ASSERT_NE(layer.bias(), nullptr);
    EXPECT_EQ(layer.bias()->value.shape(), (Shape{kOut / tp.size()}));

    const Tensor weight = gather_shards(tp, layer.weight().value, 0);
    const Tensor bias = gather_shards(tp, layer.bias()->value, 0);
    EXPECT_TRUE(same_bits(weight, full_parameter("h.0.mlp.c_fc.weight", {kOut, kIn}, init, 1234)));
    EXPECT_TRUE(same_bits(bias, full_parameter("h.0.mlp.c_fc.bias", {kOut}, init, 1234)));
  }
}

TEST(ParameterTest, RowParallelShardsGatherToTheFullTensor) {
  Communicator& tp = world();
  for (const Init& init : random_inits()) {
    SCOPED_TRACE(init.kind == Init::Kind::kNormal ? "normal" : "uniform");
    const LinearSpec spec = spec_with("h.0.mlp.c_proj", init, 99);
    RowParallelLinear layer(tp, spec);
    // Placement: columns r*in/tp .. (r+1)*in/tp of the weight; bias replicated.
    EXPECT_EQ(layer.weight().shard.dim, 1);
    EXPECT_EQ(layer.weight().shard.index, tp.rank());
    EXPECT_EQ(layer.weight().shard.count, tp.size());
    EXPECT_EQ(layer.weight().value.shape(), (Shape{kOut, kIn / tp.size()}));
    ASSERT_NE(layer.bias(), nullptr);
    EXPECT_EQ(layer.bias()->shard.count, 1);

    const Tensor weight = gather_shards(tp, layer.weight().value, 1);
    EXPECT_TRUE(same_bits(weight, full_parameter("h.0.mlp.c_proj.weight", {kOut, kIn}, init, 99)));
    // Replicated: every rank holds the whole bias, bit for bit the same.
    const Tensor full_bias = full_parameter("h.0.mlp.c_proj.bias", {kOut}, init, 99);
    EXPECT_TRUE(same_bits(layer.bias()->value, full_bias));
    const Tensor all_biases = gather_shards(tp, layer.bias()->value, 0);
    for (int r = 0; r < tp.size(); ++r) {
      EXPECT_TRUE(same_bits(all_biases.shard(0, r, tp.size()), full_bias)) << "rank " << r;
    }
  }
}

TEST(ParameterTest, EveryShardOfAnyCountTilesTheFullTensor) {
  // Independent of the world size: each part of every split of a 3-d tensor,
  // along each dim, is the matching block of the full tensor.
  const Shape shape{4, 8, 12};
  const Init init = Init::normal(1.0f);
  const Tensor full = full_parameter("blocks", shape, init, 5);
  for (int dim = 0; dim < 3; ++dim) {
    for (int count : {1, 2, 4}) {
      for (int index = 0; index < count; ++index) {
        const ShardSpec shard{shape, dim, index, count};
        Tensor local = Tensor::empty(shard.local_shape());
        fill_shard(local, shard, init, 5, "blocks");
        EXPECT_TRUE(same_bits(local, full.shard(dim, index, count).clone()))
            << "dim " << dim << ", part " << index << " of " << count;
      }
    }
  }
}

// How many elements two same-shape tensors share exactly.
int64_t equal_elements(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.to_vector(), vb = b.to_vector();
  int64_t equal = 0;
  for (size_t i = 0; i < va.size(); ++i) equal += va[i] == vb[i];
  return equal;
}

TEST(ParameterTest, NamesAndSeedsSelectDifferentValues) {
  for (const Init& init : random_inits()) {
    SCOPED_TRACE(init.kind == Init::Kind::kNormal ? "normal" : "uniform");
    const Shape shape{kOut, kIn};
    const Tensor base = full_parameter("h.0.attn.c_attn.weight", shape, init, 7);
    const Tensor again = full_parameter("h.0.attn.c_attn.weight", shape, init, 7);
    const Tensor other_name = full_parameter("h.1.attn.c_attn.weight", shape, init, 7);
    const Tensor other_seed = full_parameter("h.0.attn.c_attn.weight", shape, init, 8);
    EXPECT_TRUE(same_bits(base, again)) << "same (seed, name) must give the same tensor";
    // Independent draws from a continuous distribution coincide (almost) never.
    EXPECT_LE(equal_elements(base, other_name), 1);
    EXPECT_LE(equal_elements(base, other_seed), 1);
  }
}

TEST(ParameterTest, DrawsFollowTheRequestedDistribution) {
  // 864 draws: sample std within 10% of the requested one is > 4 standard errors.
  const Shape shape{kOut, kIn};
  const std::vector<float> normal =
      full_parameter("n.weight", shape, Init::normal(0.02f), 3).to_vector();
  double sum = 0.0, sum_sq = 0.0;
  for (float v : normal) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(normal.size());
  const double mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 0.02 * 4.0 / std::sqrt(n));
  EXPECT_NEAR(std::sqrt(sum_sq / n - mean * mean), 0.02, 0.002);

  const std::vector<float> uniform =
      full_parameter("u.weight", shape, Init::uniform(0.1f), 3).to_vector();
  const auto [lo, hi] = std::minmax_element(uniform.begin(), uniform.end());
  EXPECT_GE(*lo, -0.1f);
  EXPECT_LT(*hi, 0.1f);
  EXPECT_LT(*lo, -0.09f);  // the draws fill the interval
  EXPECT_GT(*hi, 0.09f);

  for (float v : full_parameter("z", {8}, Init::zeros(), 3).to_vector()) EXPECT_EQ(v, 0.0f);
  for (float v : full_parameter("o", {8}, Init::ones(), 3).to_vector()) EXPECT_EQ(v, 1.0f);
}

TEST(ParameterTest, LinearDefaultUsesTheFullFanIn) {
  EXPECT_EQ(Init::linear_default(kIn).kind, Init::Kind::kUniform);
  EXPECT_EQ(Init::linear_default(kIn).scale, static_cast<float>(1.0 / std::sqrt(24.0)));
  EXPECT_EQ(Init::linear_default(64).scale, 0.125f);

  // A row-parallel layer holds in/tp columns, but its default bound is still
  // 1/sqrt(in): at tp > 1 a per-shard fan-in would widen it by sqrt(tp).
  Communicator& tp = world();
  LinearSpec spec;
  spec.name = "h.0.mlp.c_proj";
  spec.in_features = kIn;
  spec.out_features = kOut;
  spec.seed = 11;
  EXPECT_EQ(spec.resolved_weight_init().scale, Init::linear_default(kIn).scale);
  EXPECT_EQ(spec.resolved_bias_init().scale, Init::linear_default(kIn).scale);
  RowParallelLinear row(tp, spec);
  const Tensor weight = gather_shards(tp, row.weight().value, 1);
  EXPECT_TRUE(same_bits(
      weight, full_parameter("h.0.mlp.c_proj.weight", {kOut, kIn}, Init::linear_default(kIn), 11)));
  const float bound = Init::linear_default(kIn).scale;
  float largest = 0.0f;
  for (float v : weight.to_vector()) largest = std::max(largest, std::fabs(v));
  EXPECT_LE(largest, bound);
  EXPECT_GT(largest, 0.95f * bound);  // 864 uniform draws reach the edge

  // Column-parallel splits the output, so fan-in is whole anyway; same bound.
  spec.name = "h.0.mlp.c_fc";
  ColumnParallelLinear column(tp, spec);
  const Tensor column_weight = gather_shards(tp, column.weight().value, 0);
  EXPECT_TRUE(same_bits(column_weight, full_parameter("h.0.mlp.c_fc.weight", {kOut, kIn},
                                                      Init::linear_default(kIn), 11)));
  EXPECT_TRUE(
      same_bits(gather_shards(tp, column.bias()->value, 0),
                full_parameter("h.0.mlp.c_fc.bias", {kOut}, Init::linear_default(kIn), 11)));
}

TEST(ParameterTest, FreshGradientsAreZero) {
  LinearSpec spec = spec_with("p", Init::normal(1.0f), 1);
  ColumnParallelLinear layer(world(), spec);
  for (float v : layer.weight().grad.to_vector()) EXPECT_EQ(v, 0.0f);
  for (float v : layer.bias()->grad.to_vector()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(layer.weight().grad.shape(), layer.weight().value.shape());
}

// Mixed precision: the compute copy is the value rounded to bf16, made by
// set_compute_dtype; it does not follow the value by itself (an optimizer
// step writes the value only) until refresh_compute; kF32 drops it.
TEST(ParameterTest, ComputeCopyIsTheRoundedValueUntilTheValueChanges) {
  Parameter p("w", ShardSpec::replicated({3, 5}), Init::normal(1.0f), 3);
  EXPECT_EQ(&p.compute(), &p.value);
  p.set_compute_dtype(DType::kBF16);
  auto rounded = [](const Tensor& t) {
    std::vector<float> v = t.to_vector();
    for (float& x : v) x = bf16_to_float(float_to_bf16(x));
    return v;
  };
  ASSERT_EQ(p.compute().dtype(), DType::kBF16);
  EXPECT_EQ(p.compute().to_vector(), rounded(p.value));
  const std::vector<float> before = p.compute().to_vector();
  p.value.fill(0.1f);  // as an update would
  EXPECT_EQ(p.compute().to_vector(), before);
  p.refresh_compute();
  EXPECT_EQ(p.compute().to_vector(), rounded(p.value));
  p.set_compute_dtype(DType::kF32);
  EXPECT_EQ(&p.compute(), &p.value);
}

}  // namespace
}  // namespace colrow
