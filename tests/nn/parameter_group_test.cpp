// ParameterGroup (nn/parameter_group.h): the parts' values and gradients move
// into one storage unchanged and stay views of it through a move, mixed
// precision's copies and a replica's sharing (the model-wide functions too);
// a part given storage of its own is caught by check_views, and the
// per-parameter calls that would do that refuse.
#include "colrow/nn/parameter_group.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "nn/layer_test_helpers.h"

namespace colrow {
namespace {

using testing::same_bits;

// Three parts of 4, 2 and 3 rows of width 5 (shards of made-up projections).
struct Parts {
  std::vector<std::unique_ptr<Parameter>> owned;
  std::vector<Parameter*> pointers;
};
Parts make_parts(uint64_t seed, Shape trailing = {5}) {
  Parts p;
  const char* names[] = {"a.weight", "b.weight", "c.weight"};
  const int64_t rows[] = {4, 2, 3};
  for (int i = 0; i < 3; ++i) {
    Shape shape{rows[i]};
    shape.insert(shape.end(), trailing.begin(), trailing.end());
    p.owned.push_back(std::make_unique<Parameter>(names[i], ShardSpec::replicated(shape),
                                                  Init::normal(1.0f), seed));
    p.owned.back()->grad.fill(static_cast<float>(i + 1));
    p.pointers.push_back(p.owned.back().get());
  }
  return p;
}

std::vector<float> rounded_to_bf16(const Tensor& t) {
  std::vector<float> v = t.to_vector();
  for (float& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}

TEST(ParameterGroupTest, PartsKeepTheirValuesAndViewOneStorage) {
  Parts parts = make_parts(1);
  std::vector<Tensor> values, grads;
  for (Parameter* p : parts.pointers) {
    values.push_back(p->value.clone());
    grads.push_back(p->grad.clone());
  }
  ParameterGroup group(parts.pointers);
  ASSERT_EQ(group.value().shape(), (Shape{9, 5}));
  int64_t row = 0;
  for (size_t i = 0; i < parts.pointers.size(); ++i) {
    Parameter& p = *parts.pointers[i];
    EXPECT_EQ(p.group, &group);
    EXPECT_TRUE(same_bits(p.value, values[i])) << p.name;
    EXPECT_TRUE(same_bits(p.grad, grads[i])) << p.name;
    EXPECT_TRUE(same_bits(group.value().slice(0, row, p.value.size(0)).clone(), values[i]));
    EXPECT_TRUE(p.value.is_contiguous());
    row += p.value.size(0);
  }
  // Writes through a part are the group's, and the other way round.
  parts.pointers[1]->value.fill(3.5f);
  for (float v : group.value().slice(0, 4, 2).clone().to_vector()) EXPECT_EQ(v, 3.5f);
  group.grad().zero();
  for (Parameter* p : parts.pointers) {
    for (float v : p->grad.to_vector()) EXPECT_EQ(v, 0.0f);
  }
  // Parts 1 and 2's gradient rows, one view.
  Tensor kv = group.grad_of_parts(1, 2);
  EXPECT_EQ(kv.shape(), (Shape{5, 5}));
  EXPECT_EQ(kv.raw_data(), parts.pointers[1]->grad.raw_data());
  EXPECT_THROW(group.grad_of_parts(2, 2), InternalError);
  EXPECT_NO_THROW(group.check_views("test"));
  // Gradients move only into a contiguous place of as many elements.
  EXPECT_THROW(group.move_grads_into(Tensor::zeros({44})), InternalError) << "one too few";
  EXPECT_THROW(group.move_grads_into(Tensor::zeros({9, 6}).slice(1, 0, 5)), InternalError)
      << "strided";
  Tensor place = Tensor::zeros({45});
  group.move_grads_into(place);
  EXPECT_EQ(parts.pointers[0]->grad.raw_data(), place.raw_data());
  EXPECT_NO_THROW(group.check_views("after the move"));
}

TEST(ParameterGroupTest, ComputeCopiesAndMovesKeepTheViews) {
  Parts parts = make_parts(2);
  ParameterGroup group(parts.pointers);
  EXPECT_EQ(&group.compute(), &group.value());
  group.set_compute_dtype(DType::kBF16);
  ASSERT_EQ(group.compute().dtype(), DType::kBF16);
  EXPECT_EQ(group.compute().to_vector(), rounded_to_bf16(group.value()));
  for (Parameter* p : parts.pointers) {
    EXPECT_EQ(p->compute().dtype(), DType::kBF16) << p->name;
    EXPECT_EQ(p->compute().to_vector(), rounded_to_bf16(p->value)) << p->name;
  }
  // An update and a part's refresh_compute reach the group's copy.
  parts.pointers[2]->value.fill(0.1f);
  parts.pointers[2]->refresh_compute();
  EXPECT_EQ(group.compute().to_vector(), rounded_to_bf16(group.value()));
  group.to(Device::cpu());  // already there: the same storage
  EXPECT_NO_THROW(group.check_views("after to"));
  group.set_compute_dtype(DType::kF32);
  for (Parameter* p : parts.pointers) EXPECT_EQ(&p->compute(), &p->value) << p->name;
  EXPECT_NO_THROW(group.check_views("after kF32"));
}

TEST(ParameterGroupTest, AReplicaSharesTheOwnersStorage) {
  Parts owner_parts = make_parts(3), replica_parts = make_parts(4);
  ParameterGroup owner(owner_parts.pointers), replica(replica_parts.pointers);
  replica.share_storage_of(owner);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(replica_parts.pointers[i]->value.raw_data(),
              owner_parts.pointers[i]->value.raw_data());
    EXPECT_EQ(replica_parts.pointers[i]->grad.raw_data(), owner_parts.pointers[i]->grad.raw_data());
    EXPECT_EQ(replica_parts.pointers[i]->group, &replica);
  }
  EXPECT_NO_THROW(replica.check_views("shared"));
  Parts other_shape = make_parts(5, {6});
  ParameterGroup different(other_shape.pointers);
  EXPECT_THROW(replica.share_storage_of(different), InternalError);
}

// What the model calls (GptModel::to, set_compute_dtype, make_replica) on a
// list that mixes grouped and ungrouped parameters.
TEST(ParameterGroupTest, ModelWideFunctionsTakeGroupsWhole) {
  Parts grouped = make_parts(6), their_grouped = make_parts(7);
  Parameter loose("d.bias", ShardSpec::replicated({5}), Init::normal(1.0f), 6);
  Parameter their_loose("d.bias", ShardSpec::replicated({5}), Init::normal(1.0f), 7);
  ParameterGroup group(grouped.pointers), their_group(their_grouped.pointers);
  std::vector<Parameter*> mine = grouped.pointers, theirs = their_grouped.pointers;
  mine.insert(mine.begin() + 1, &loose);  // a loose one between parts, as a model may list them
  theirs.insert(theirs.begin() + 1, &their_loose);

  move_parameters(mine, Device::cpu());
  set_compute_dtype(mine, DType::kBF16);
  EXPECT_EQ(loose.compute().dtype(), DType::kBF16);
  EXPECT_EQ(group.compute().dtype(), DType::kBF16);
  EXPECT_NO_THROW(group.check_views("bf16"));
  set_compute_dtype(theirs, DType::kBF16);
  share_parameters(mine, theirs);
  EXPECT_EQ(loose.value.raw_data(), their_loose.value.raw_data());
  EXPECT_EQ(grouped.pointers[0]->value.raw_data(), their_grouped.pointers[0]->value.raw_data());
  EXPECT_EQ(grouped.pointers[2]->compute_copy.raw_data(),
            their_grouped.pointers[2]->compute_copy.raw_data());
  EXPECT_NO_THROW(group.check_views("shared"));
  // A list grouped differently from its owner's is refused.
  std::vector<Parameter*> ungrouped_owner = {&their_loose, &their_loose, &their_loose,
                                             &their_loose};
  EXPECT_THROW(share_parameters(mine, ungrouped_owner), InternalError);
}

// A part given storage of its own behind the group's back would leave a
// fused layer computing with the group's stale rows: check_views names it,
// and the per-parameter calls that would do it refuse.
TEST(ParameterGroupTest, APartWithStorageOfItsOwnIsCaught) {
  Parts parts = make_parts(8);
  ParameterGroup group(parts.pointers);
  EXPECT_THROW(parts.pointers[0]->to(Device::cpu()), InternalError);
  EXPECT_THROW(parts.pointers[0]->set_compute_dtype(DType::kBF16), InternalError);
  parts.pointers[1]->value = parts.pointers[1]->value.clone();
  try {
    group.check_views("forward");
    FAIL() << "a reassigned part passed";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("b.weight"), std::string::npos) << e.what();
  }
  // Parts that cannot be stacked.
  Parts wide = make_parts(9, {6}), narrow = make_parts(10);
  const std::vector<Parameter*> mixed = {wide.pointers[0], narrow.pointers[0]};
  EXPECT_THROW(ParameterGroup{mixed}, InternalError) << "trailing dims differ";
  EXPECT_THROW(ParameterGroup{std::vector<Parameter*>{parts.pointers[2]}}, InternalError)
      << "already grouped";
  EXPECT_THROW(ParameterGroup{std::vector<Parameter*>{}}, InternalError) << "no parts";
}

}  // namespace
}  // namespace colrow
