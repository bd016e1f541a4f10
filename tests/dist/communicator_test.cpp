// Communicator: every collective (all_reduce_sum/max, all_gather and
// reduce_scatter_sum along dim 0, broadcast from each root, barrier, split,
// all_ranks_failing) over MPI (the world, a dup, split groups), over
// LocalCommunicator, and through RecordingCommunicator, whose events are checked
// too. Inputs are small rank-dependent integers, so results must match exactly.
// bf16 tensors over MPI, and the bf16 wire's sums: tests/dist/bf16_collectives.h.
#include "colrow/dist/communicator.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/local_communicator.h"
#include "colrow/dist/mpi_communicator.h"
#include "colrow/dist/recording_communicator.h"
#include "dist/bf16_collectives.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using Clock = std::chrono::steady_clock;

// A tensor of `shape` whose flat element k is value(k).
Tensor make(const Shape& shape, const std::function<float(int64_t)>& value) {
  Tensor t = Tensor::empty(shape);
  for (int64_t k = 0; k < t.numel(); ++k) t.data()[k] = value(k);
  return t;
}

// Exact comparison of every flat element; reports the first few mismatches only.
void expect_values(const Tensor& t, const std::function<float(int64_t)>& expected,
                   const std::string& what) {
  const std::vector<float> v = t.to_vector();
  int mismatches = 0;
  for (int64_t k = 0; k < static_cast<int64_t>(v.size()); ++k) {
    if (v[k] == expected(k)) continue;
    if (++mismatches <= 5) {
      ADD_FAILURE() << what << ": element " << k << " is " << v[k] << ", expected " << expected(k);
    }
  }
  EXPECT_EQ(mismatches, 0) << what << ": mismatching elements";
}

// Each helper below is called by every rank of `c` and checks one collective
// against values computed from c.rank() and c.size() alone.

void check_all_reduce_sum(Communicator& c) {
  const int size = c.size(), rank = c.rank();
  // Rank q holds (q + 1) * (k + 1) + 7 * q: a rank missing or counted twice changes the sum.
  auto input = [](int q, int64_t k) { return static_cast<float>((q + 1) * (k + 1) + 7 * q); };
  Tensor x = make({2, 3}, [&](int64_t k) { return input(rank, k); });
  c.all_reduce_sum(x);
  EXPECT_EQ(x.shape(), (Shape{2, 3}));
  expect_values(
      x,
      [&](int64_t k) {
        float sum = 0.0f;
        for (int q = 0; q < size; ++q) sum += input(q, k);
        return sum;
      },
      "all_reduce_sum over " + c.name());
}

void check_all_reduce_max(Communicator& c) {
  const int size = c.size(), rank = c.rank();
  // Even elements grow with the rank, odd ones shrink (negative): the max comes
  // from the last rank for even k and from rank 0 for odd k.
  auto input = [](int q, int64_t k) {
    return static_cast<float>(k % 2 == 0 ? 10 * q + k : -10 * q + k);
  };
  Tensor x = make({7}, [&](int64_t k) { return input(rank, k); });
  c.all_reduce_max(x);
  expect_values(
      x, [&](int64_t k) { return input(k % 2 == 0 ? size - 1 : 0, k); },
      "all_reduce_max over " + c.name());
}

void check_all_gather(Communicator& c) {
  const int size = c.size(), rank = c.rank();
  // in: [2, 3] holding 100 * rank + 10 * a + b at (a, b) -> out: [2 * size, 3].
  Tensor in = make(
      {2, 3}, [&](int64_t k) { return static_cast<float>(100 * rank + 10 * (k / 3) + k % 3); });
  Tensor out = Tensor::full({2 * size, 3}, -1.0f);
  c.all_gather(in, out);
  expect_values(
      out,
      [&](int64_t k) {
        const int64_t row = k / 3, col = k % 3;
        return static_cast<float>(100 * (row / 2) + 10 * (row % 2) + col);
      },
      "all_gather [2, 3] over " + c.name());
  expect_values(
      in, [&](int64_t k) { return static_cast<float>(100 * rank + 10 * (k / 3) + k % 3); },
      "all_gather leaves its input alone over " + c.name());

  // One element per rank, and a 3-d block: still a plain dim-0 concatenation.
  Tensor one = Tensor::full({1}, static_cast<float>(rank));
  Tensor ranks = Tensor::full({size}, -1.0f);
  c.all_gather(one, ranks);
  expect_values(
      ranks, [](int64_t k) { return static_cast<float>(k); }, "all_gather [1] over " + c.name());
  Tensor cube = make({2, 2, 2}, [&](int64_t k) { return static_cast<float>(8 * rank + k); });
  Tensor cubes = Tensor::full({2 * size, 2, 2}, -1.0f);
  c.all_gather(cube, cubes);
  expect_values(
      cubes, [](int64_t k) { return static_cast<float>(k); },
      "all_gather [2, 2, 2] over " + c.name());
}

void check_reduce_scatter_sum(Communicator& c) {
  const int size = c.size(), rank = c.rank();
  // in: [2 * size, 3] with (q + 1) * (10 * row + col) on rank q -> out: rank's
  // rows [2 * rank, 2 * rank + 2) of the sum.
  auto input = [](int q, int64_t row, int64_t col) {
    return static_cast<float>((q + 1) * (10 * row + col));
  };
  Tensor in = make({2 * size, 3}, [&](int64_t k) { return input(rank, k / 3, k % 3); });
  Tensor out = Tensor::full({2, 3}, -1.0f);
  c.reduce_scatter_sum(in, out);
  expect_values(
      out,
      [&](int64_t k) {
        float sum = 0.0f;
        for (int q = 0; q < size; ++q) sum += input(q, 2 * rank + k / 3, k % 3);
        return sum;
      },
      "reduce_scatter_sum over " + c.name());
}

void check_broadcast_from_every_root(Communicator& c) {
  const int size = c.size(), rank = c.rank();
  for (int root = 0; root < size; ++root) {
    Tensor x = make({2, 5}, [&](int64_t k) { return static_cast<float>(100 * rank + k); });
    c.broadcast(x, root);
    expect_values(
        x, [&](int64_t k) { return static_cast<float>(100 * root + k); },
        "broadcast from root " + std::to_string(root) + " over " + c.name());
  }
}

void check_collectives(Communicator& c) {
  check_all_reduce_sum(c);
  check_all_reduce_max(c);
  check_all_gather(c);
  check_reduce_scatter_sum(c);
  check_broadcast_from_every_root(c);
  c.barrier();
}

TEST(MpiCommunicatorTest, WorldIsMpiCommWorld) {
  Communicator& world = testing::world();
  auto* mpi = dynamic_cast<MpiCommunicator*>(&world);
  ASSERT_NE(mpi, nullptr);
  EXPECT_EQ(mpi->handle(), MPI_COMM_WORLD);
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(world.rank(), rank);
  EXPECT_EQ(world.size(), size);
  EXPECT_EQ(world.name(), "world");
}

TEST(MpiCommunicatorTest, Bf16TensorsTravelAsFp32AndRoundOnce) {
  testing::check_bf16_collectives(testing::world(), "mpi");
}

TEST(MpiCommunicatorTest, Bf16WireSumsAddInFp32AndStayWithinTheirRoundings) {
  for (int64_t n : {2, 17, 1001}) {
    testing::check_bf16_wire_sums(testing::world(), "mpi", n, /*rounds_once=*/false);
  }
}

TEST(MpiCommunicatorTest, AllReduceSum) {
  check_all_reduce_sum(testing::world());
}
TEST(MpiCommunicatorTest, AllReduceMax) {
  check_all_reduce_max(testing::world());
}
TEST(MpiCommunicatorTest, AllGatherConcatenatesAlongDim0) {
  check_all_gather(testing::world());
}
TEST(MpiCommunicatorTest, ReduceScatterSumKeepsMyDim0Block) {
  check_reduce_scatter_sum(testing::world());
}
TEST(MpiCommunicatorTest, BroadcastFromEveryRoot) {
  check_broadcast_from_every_root(testing::world());
}

TEST(MpiCommunicatorTest, AllReduceSumOfAnEmptyTensorIsANoOp) {
  Tensor x = Tensor::empty({0, 3});
  testing::world().all_reduce_sum(x);
  EXPECT_EQ(x.numel(), 0);
}

TEST(MpiCommunicatorTest, BarrierWaitsForTheLastRank) {
  Communicator& world = testing::world();
  if (world.size() == 1) GTEST_SKIP() << "a barrier of one rank has nobody to wait for";
  constexpr auto kLateBy = std::chrono::milliseconds(300);
  world.barrier();  // start together
  const int last = world.size() - 1;
  if (world.rank() == last) std::this_thread::sleep_for(kLateBy);
  const auto start = Clock::now();
  world.barrier();  // every rank calls it; the last one arrives late
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  if (world.rank() != last) {
    // Generous margin: the ranks left the first barrier at slightly different times.
    EXPECT_GE(waited, 0.1) << "rank " << world.rank() << " left the barrier before rank " << last
                           << " entered it";
  }
}

TEST(MpiCommunicatorTest, AllRanksFailingIsTrueWhenEveryRankCallsIt) {
  Communicator& world = testing::world();
  EXPECT_TRUE(world.all_ranks_failing(60.0));
  // Its private channel leaves the user collectives in step.
  check_all_reduce_sum(world);
  EXPECT_TRUE(world.all_ranks_failing(60.0));
  world.barrier();
}

TEST(MpiCommunicatorTest, OwnedDuplicateOfWorld) {
  MPI_Comm dup;
  ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &dup), MPI_SUCCESS);
  MpiCommunicator c(dup, "copy");  // owns dup and frees it at the end of the test
  EXPECT_EQ(c.rank(), testing::world().rank());
  EXPECT_EQ(c.size(), testing::world().size());
  EXPECT_EQ(c.name(), "copy");
  check_collectives(c);
}

TEST(MpiCommunicatorTest, SplitEvenAndOddRanks) {
  Communicator& world = testing::world();
  const int world_rank = world.rank(), world_size = world.size();
  std::unique_ptr<Communicator> parity = world.split(world_rank % 2, world_rank, "parity");
  const int members = world_rank % 2 == 0 ? (world_size + 1) / 2 : world_size / 2;
  EXPECT_EQ(parity->size(), members);
  EXPECT_EQ(parity->rank(), world_rank / 2);
  EXPECT_EQ(parity->name(), "parity");

  // The members, in key order: world ranks world_rank % 2, +2, +4, ...
  Tensor mine = Tensor::full({1}, static_cast<float>(world_rank));
  Tensor members_world_ranks = Tensor::full({members}, -1.0f);
  parity->all_gather(mine, members_world_ranks);
  expect_values(
      members_world_ranks, [&](int64_t k) { return static_cast<float>(world_rank % 2 + 2 * k); },
      "world ranks of my parity group");
  check_collectives(*parity);
}

TEST(MpiCommunicatorTest, SplitOrdersByKey) {
  Communicator& world = testing::world();
  const int world_size = world.size();
  // One group of everyone, keyed backwards: group rank = world_size - 1 - world rank.
  std::unique_ptr<Communicator> reversed =
      world.split(/*color=*/0, /*key=*/world_size - world.rank(), "reversed");
  EXPECT_EQ(reversed->size(), world_size);
  EXPECT_EQ(reversed->rank(), world_size - 1 - world.rank());
  Tensor mine = Tensor::full({1}, static_cast<float>(world.rank()));
  Tensor order = Tensor::full({world_size}, -1.0f);
  reversed->all_gather(mine, order);
  expect_values(
      order, [&](int64_t k) { return static_cast<float>(world_size - 1 - k); },
      "world ranks in key order");
  check_collectives(*reversed);
}

TEST(MpiCommunicatorTest, SplitIntoGroupsOfOne) {
  Communicator& world = testing::world();
  std::unique_ptr<Communicator> alone = world.split(world.rank(), 0, "alone");
  EXPECT_EQ(alone->size(), 1);
  EXPECT_EQ(alone->rank(), 0);
  check_collectives(*alone);
  EXPECT_TRUE(alone->all_ranks_failing(60.0));
}

TEST(MpiCommunicatorTest, MalformedShapesThrowBeforeCommunicating) {
  Communicator& world = testing::world();
  const int size = world.size();
  // Shapes are identical on every rank, so every rank throws and none waits.
  Tensor in = Tensor::zeros({2, 3});
  Tensor too_big = Tensor::zeros({2 * size + 2, 3});
  EXPECT_THROW(world.all_gather(in, too_big), InternalError);
  Tensor wrong_out = Tensor::zeros({3, 3});
  EXPECT_THROW(world.reduce_scatter_sum(Tensor::zeros({2 * size, 3}), wrong_out), InternalError);
  // Collectives work on contiguous memory; a column block is a strided view.
  const Tensor strided = Tensor::zeros({2, 6}).slice(1, 0, 3);
  Tensor out = Tensor::zeros({2 * size, 3});
  try {
    world.all_gather(strided, out);
    ADD_FAILURE() << "all_gather of a strided view did not throw";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("[dist] all_gather over world"), std::string::npos)
        << e.what();
  }
  world.barrier();
}

TEST(MpiCommunicatorTest, InvalidBroadcastRootIsRejectedAtEverySize) {
  Communicator& world = testing::world();
  // Checked before MPI is called, so a group of one catches it too.
  Tensor x = Tensor::zeros({4});
  EXPECT_THROW(world.broadcast(x, world.size()), InternalError);
  EXPECT_THROW(world.broadcast(x, -1), InternalError);
  world.barrier();
}

TEST(MpiCommunicatorTest, FailedMpiCallBecomesBackendError) {
  Communicator& world = testing::world();
  MPI_Comm comm = dynamic_cast<MpiCommunicator&>(world).handle();
  // A negative count is rejected locally by MPI (MPI_ERRORS_RETURN) on every
  // rank, so nobody is left inside the collective.
  float value = 0.0f;
  try {
    COLROW_MPI_CHECK(MPI_Bcast(&value, -1, MPI_FLOAT, 0, comm));
    ADD_FAILURE() << "MPI_Bcast with a negative count did not fail";
  } catch (const BackendError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("[mpi] MPI_Bcast", 0), 0u) << message;
    EXPECT_NE(message.find("world rank " + std::to_string(world.rank())), std::string::npos)
        << message;
  }
  world.barrier();
}

TEST(LocalCommunicatorTest, IsAGroupOfOne) {
  LocalCommunicator alone("solo");
  EXPECT_EQ(alone.rank(), 0);
  EXPECT_EQ(alone.size(), 1);
  EXPECT_EQ(alone.name(), "solo");
  EXPECT_EQ(LocalCommunicator().name(), "local");
  check_collectives(alone);
  EXPECT_TRUE(alone.all_ranks_failing(0.0));
}

TEST(LocalCommunicatorTest, Bf16WireSumsOfOneRankAreItsValues) {
  LocalCommunicator alone;
  testing::check_bf16_wire_sums(alone, "local", 17, /*rounds_once=*/true);
}

TEST(LocalCommunicatorTest, BroadcastFromAnotherRootIsABug) {
  LocalCommunicator alone;
  Tensor x = Tensor::zeros({3});
  EXPECT_THROW(alone.broadcast(x, 1), InternalError);
}

TEST(LocalCommunicatorTest, SplitGivesAnotherGroupOfOne) {
  LocalCommunicator alone;
  std::unique_ptr<Communicator> sub = alone.split(3, 7, "sub");
  ASSERT_NE(dynamic_cast<LocalCommunicator*>(sub.get()), nullptr);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(sub->rank(), 0);
  EXPECT_EQ(sub->name(), "sub");
  check_collectives(*sub);
}

TEST(RecordingCommunicatorTest, ForwardsAndRecordsEveryCollective) {
  Communicator& world = testing::world();
  const int size = world.size();
  RecordingCommunicator recording(world);
  EXPECT_EQ(recording.rank(), world.rank());
  EXPECT_EQ(recording.size(), size);
  EXPECT_EQ(recording.name(), "world");
  EXPECT_TRUE(recording.events().empty());

  check_collectives(recording);  // the results are checked through the wrapper

  // Counts are the elements this rank contributes.
  std::vector<CollectiveEvent> expected = {
      {"all_reduce_sum", 6, 0.0},             // [2, 3]
      {"all_reduce_max", 7, 0.0},             // [7]
      {"all_gather", 6, 0.0},                 // [2, 3] -> [2 * size, 3]
      {"all_gather", 1, 0.0},                 // [1] -> [size]
      {"all_gather", 8, 0.0},                 // [2, 2, 2] -> [2 * size, 2, 2]
      {"reduce_scatter_sum", 6 * size, 0.0},  // [2 * size, 3] -> [2, 3]
  };
  for (int root = 0; root < size; ++root) expected.push_back({"broadcast", 10, 0.0});
  expected.push_back({"barrier", 0, 0.0});
  EXPECT_EQ(recording.events(), expected);

  double total = 0.0;
  for (const CollectiveEvent& e : recording.events()) {
    EXPECT_GE(e.seconds, 0.0) << e.op;
    total += e.seconds;
  }
  EXPECT_DOUBLE_EQ(recording.total_seconds(), total);

  recording.clear();
  EXPECT_TRUE(recording.events().empty());
  EXPECT_EQ(recording.total_seconds(), 0.0);
}

TEST(RecordingCommunicatorTest, RecordsTheBf16WireSumsUnderTheirNames) {
  Communicator& world = testing::world();
  const int size = world.size();
  RecordingCommunicator recording(world);
  testing::check_bf16_wire_sums(recording, "recording", 4, /*rounds_once=*/false);
  // Each sum twice (the second must give the same bits), then once started;
  // the refused fp32 calls threw inside the inner communicator, so they left
  // no event.
  std::vector<std::string> sums;
  for (const CollectiveEvent& e : recording.events()) {
    if (e.op.find("bf16_wire") != std::string::npos)
      sums.push_back(e.op + ":" + std::to_string(e.count));
  }
  const std::string reduce = "all_reduce_sum_bf16_wire:4";
  const std::string scatter = "reduce_scatter_sum_bf16_wire:" + std::to_string(4 * size);
  EXPECT_EQ(sums, (std::vector<std::string>{reduce, reduce, scatter, scatter, reduce, scatter}));
}

TEST(RecordingCommunicatorTest, EventIdentityIgnoresTime) {
  EXPECT_EQ((CollectiveEvent{"all_gather", 4, 0.5}), (CollectiveEvent{"all_gather", 4, 2.0}));
  EXPECT_FALSE((CollectiveEvent{"all_gather", 4, 0.0}) == (CollectiveEvent{"all_gather", 5, 0.0}));
  EXPECT_FALSE((CollectiveEvent{"all_gather", 4, 0.0}) ==
               (CollectiveEvent{"all_reduce_sum", 4, 0.0}));
}

TEST(RecordingCommunicatorTest, AllRanksFailingIsForwardedAndNotRecorded) {
  RecordingCommunicator recording(testing::world());
  EXPECT_TRUE(recording.all_ranks_failing(60.0));
  EXPECT_TRUE(recording.events().empty());
}

TEST(RecordingCommunicatorTest, SplitRecordsIntoANewRecorder) {
  Communicator& world = testing::world();
  const int world_rank = world.rank();
  RecordingCommunicator recording(world);
  std::unique_ptr<Communicator> parity = recording.split(world_rank % 2, world_rank, "parity");
  EXPECT_TRUE(recording.events().empty()) << "split is not a recorded collective";
  auto* sub = dynamic_cast<RecordingCommunicator*>(parity.get());
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->name(), "parity");
  EXPECT_EQ(sub->rank(), world_rank / 2);

  check_all_reduce_sum(*sub);
  EXPECT_EQ(sub->events(), (std::vector<CollectiveEvent>{{"all_reduce_sum", 6, 0.0}}));
  EXPECT_TRUE(recording.events().empty()) << "the parent records only its own collectives";
}

TEST(RecordingCommunicatorTest, WrapsALocalCommunicator) {
  LocalCommunicator alone;
  RecordingCommunicator recording(alone);
  Tensor x = Tensor::full({3, 4}, 2.0f);
  recording.all_reduce_sum(x);  // recorded even though a group of one does nothing
  expect_values(
      x, [](int64_t) { return 2.0f; }, "all_reduce_sum over one rank");
  EXPECT_EQ(recording.events(), (std::vector<CollectiveEvent>{{"all_reduce_sum", 12, 0.0}}));
}

}  // namespace
}  // namespace colrow
