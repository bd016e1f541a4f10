// ProfiledCommunicator: every collective and message reaches the wrapped
// communicator unchanged (the same results as calling it directly), and while
// --profile's operation timing is on, each is one timed operation in the
// "communication" phase, with the bytes it moved; a started collective is two,
// its start and its wait. With timing off, or in a group of one, nothing is
// recorded.
#include "colrow/dist/profiled_communicator.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "colrow/dist/communicator.h"
#include "kernels/op_profile.h"
#include "support/test_world.h"

namespace colrow {
namespace {

std::unique_ptr<ProfiledCommunicator> profiled_world() {
  Communicator& world = testing::world();
  return std::make_unique<ProfiledCommunicator>(world.split(0, world.rank(), "profiled"));
}

// The timed operations since the last call, by name.
std::map<std::string, kernels::OpTime> timed() {
  std::map<std::string, kernels::OpTime> by_op;
  for (const kernels::OpTime& t : kernels::take_op_times()) by_op[t.op] = t;
  return by_op;
}

struct ProfilingOn {
  ProfilingOn() {
    kernels::take_op_times();  // nothing left from before
    kernels::set_op_profiling(true);
  }
  ~ProfilingOn() { kernels::set_op_profiling(false); }
};

TEST(ProfiledCommunicatorTest, ForwardsEveryCollectiveUnchanged) {
  auto c = profiled_world();
  const int size = c->size(), rank = c->rank();
  Tensor x = Tensor::full({3}, static_cast<float>(rank + 1));
  c->all_reduce_sum(x);
  const float total = static_cast<float>(size * (size + 1) / 2);
  EXPECT_EQ(x.to_vector(), std::vector<float>(3, total));
  Tensor m = Tensor::full({2}, static_cast<float>(rank));
  c->all_reduce_max(m);
  EXPECT_EQ(m.to_vector(), std::vector<float>(2, static_cast<float>(size - 1)));
  Tensor gathered = Tensor::empty({size});
  c->all_gather(Tensor::full({1}, static_cast<float>(rank)), gathered);
  for (int r = 0; r < size; ++r) EXPECT_EQ(gathered.to_vector()[r], static_cast<float>(r));
  Tensor scattered = Tensor::empty({1});
  c->reduce_scatter_sum(Tensor::full({size}, 1.0f), scattered);
  EXPECT_EQ(scattered.to_vector()[0], static_cast<float>(size));
  Tensor b = Tensor::full({1}, static_cast<float>(rank));
  c->broadcast(b, 0);
  EXPECT_EQ(b.to_vector()[0], 0.0f);
  Tensor started = Tensor::full({4}, 1.0f);
  c->start_all_reduce_sum(started)->wait();
  EXPECT_EQ(started.to_vector(), std::vector<float>(4, static_cast<float>(size)));
  EXPECT_EQ(c->size(), testing::world().size());
  EXPECT_EQ(c->name(), "profiled");
}

TEST(ProfiledCommunicatorTest, TimesEachCallAsACommunicationOperation) {
  auto c = profiled_world();
  if (c->size() == 1) GTEST_SKIP() << "a group of one is not timed (see GroupsOfOneAreNotTimed)";
  const ProfilingOn on;
  Tensor x = Tensor::full({256}, 1.0f);
  c->all_reduce_sum(x);
  c->all_reduce_sum(x);
  Tensor gathered = Tensor::empty({c->size() * 8});
  c->all_gather(Tensor::full({8}, 1.0f), gathered);
  Tensor started = Tensor::full({16}, 1.0f);
  auto pending = c->start_all_reduce_sum(started);
  pending->wait();
  pending->wait();  // timed once
  const auto ops = timed();
  ASSERT_EQ(ops.count("all_reduce_sum"), 1u);
  EXPECT_EQ(ops.at("all_reduce_sum").calls, 2);
  EXPECT_EQ(ops.at("all_reduce_sum").work.bytes, 2.0 * 256 * 4);
  ASSERT_EQ(ops.count("all_gather"), 1u);
  EXPECT_EQ(ops.at("all_gather").work.bytes, (8.0 + c->size() * 8.0) * 4);
  ASSERT_EQ(ops.count("all_reduce_sum (start)"), 1u);
  ASSERT_EQ(ops.count("all_reduce_sum (wait)"), 1u);
  EXPECT_EQ(ops.at("all_reduce_sum (wait)").calls, 1);
  for (const auto& [op, t] : ops) EXPECT_EQ(kernels::op_phase(op), "communication") << op;
  EXPECT_EQ(ops.size(), 4u);
}

// Its collectives return at once: no row of nothing at every tp 1.
TEST(ProfiledCommunicatorTest, GroupsOfOneAreNotTimed) {
  Communicator& world = testing::world();
  ProfiledCommunicator alone(world.split(world.rank(), 0, "alone"));
  ASSERT_EQ(alone.size(), 1);
  const ProfilingOn on;
  Tensor x = Tensor::full({4}, 1.0f);
  alone.all_reduce_sum(x);
  alone.start_all_reduce_sum(x)->wait();
  EXPECT_EQ(x.to_vector(), std::vector<float>(4, 1.0f));
  EXPECT_TRUE(kernels::take_op_times().empty());
}

TEST(ProfiledCommunicatorTest, RecordsNothingWithProfilingOff) {
  auto c = profiled_world();
  kernels::take_op_times();
  Tensor x = Tensor::full({4}, 1.0f);
  c->all_reduce_sum(x);
  EXPECT_TRUE(kernels::take_op_times().empty());
}

TEST(ProfiledCommunicatorTest, SplitsAreProfiledToo) {
  auto c = profiled_world();
  std::unique_ptr<Communicator> same = c->split(0, c->rank(), "same");
  ASSERT_NE(dynamic_cast<ProfiledCommunicator*>(same.get()), nullptr);
  const ProfilingOn on;
  Tensor x = Tensor::full({2}, 1.0f);
  same->all_reduce_sum(x);
  EXPECT_EQ(timed().count("all_reduce_sum"), same->size() > 1 ? 1u : 0u);
}

}  // namespace
}  // namespace colrow
