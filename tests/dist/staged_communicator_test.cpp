// StagedCommunicator on GPU tensors: every collective compared bitwise with
// MpiCommunicator on the same inputs (small integers, which sum exactly in any
// order) at 1, 3 and 1000 elements per rank; non-contiguous and misplaced
// operands rejected on every rank before communicating; split; CPU tensors
// passed straight to MPI; the staging buffer reused; messages (ring, pair
// exchange, count mismatch). At np 2 on a one-GPU
// machine both ranks use cuda:0: the case this communicator exists for.
#include "dist/staged/staged_communicator.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/dist/device_communicator.h"
#include "colrow/dist/mpi_communicator.h"
#include "dist/bf16_collectives.h"
#include "dist/device_communicator_checks.h"
#include "support/gpu.h"
#include "support/test_world.h"

namespace colrow {
namespace {

using namespace device_comm_testing;

// Over the world's ranks in the world's order, so MPI on the world is the reference.
std::unique_ptr<StagedCommunicator> make_staged() {
  Communicator& world = testing::world();
  return std::make_unique<StagedCommunicator>(world.split(0, world.rank(), "tp"), gpu());
}

TEST(StagedCommunicatorTest, AllReduceSumMatchesMpi) {
  COLROW_REQUIRE_GPU();
  auto c = make_staged();
  for (int64_t n : kCounts) check_all_reduce(*c, gpu(), n, false);
}

TEST(StagedCommunicatorTest, Bf16TensorsTravelAsFp32AndRoundOnce) {
  COLROW_REQUIRE_GPU();
  auto c = make_staged();
  testing::check_bf16_collectives(*c, "staged", gpu());
}

TEST(StagedCommunicatorTest, Bf16WireSumsGoToTheHostsBf16Wire) {
  COLROW_REQUIRE_GPU();
  auto c = make_staged();
  for (int64_t n : {2, 1001}) {
    testing::check_bf16_wire_sums(*c, "staged", n, /*rounds_once=*/false, gpu());
  }
}

TEST(StagedCommunicatorTest, AllReduceMaxMatchesMpi) {
  COLROW_REQUIRE_GPU();
  auto c = make_staged();
  for (int64_t n : kCounts) check_all_reduce(*c, gpu(), n, true);
}

TEST(StagedCommunicatorTest, AllGatherMatchesMpi) {
  COLROW_REQUIRE_GPU();
  auto c = make_staged();
  for (int64_t n : kCounts) check_all_gather(*c, gpu(), n);
}

TEST(StagedCommunicatorTest, ReduceScatterSumMatchesMpi) {
  COLROW_REQUIRE_GPU();
  auto c = make_staged();
  for (int64_t n : kCounts) check_reduce_scatter_sum(*c, gpu(), n);
}

TEST(StagedCommunicatorTest, BroadcastFromEveryRootMatchesMpi) {
  COLROW_REQUIRE_GPU();
  auto c = make_staged();
  for (int64_t n : kCounts) check_broadcast_from_every_root(*c, gpu(), n);
}

TEST(StagedCommunicatorTest, BadOperandsAreRejectedAtEverySize) {
  COLROW_REQUIRE_GPU();
  auto c = make_staged();
  check_rejects_bad_operands(*c, gpu());
}

TEST(StagedCommunicatorTest, MessagesTravelThroughTheHost) {
  COLROW_REQUIRE_GPU();
  auto c = make_staged();
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{100003}}) {
    check_ring_exchange(*c, gpu(), n);
    check_pair_exchange(*c, gpu(), n);
    check_ring_exchange(*c, Device::cpu(), n);        // host tensors go straight to MPI
    check_ring_exchange(*c, gpu(), n, DType::kBF16);  // bf16 as bf16 (pipeline activations)
  }
  check_rejects_bad_peers(*c, gpu());
}

TEST(StagedCommunicatorTest, MessageCountMismatchIsAnError) {
  COLROW_REQUIRE_GPU();
  auto c = make_staged();
  if (c->size() < 2) GTEST_SKIP() << "needs two ranks";
  const int next = (c->rank() + 1) % c->size(), prev = (c->rank() + c->size() - 1) % c->size();
  const Tensor out = Tensor::zeros({7}, gpu());
  Tensor in = Tensor::zeros({8}, gpu());
  std::unique_ptr<PendingCollective> sent = c->start_send(out, next, 0);
  expect_internal_error([&] { c->recv(in, prev, 0); }, "message count (7) must equal",
                        "7 floats received into 8");
  sent->wait();
}

TEST(StagedCommunicatorTest, MpiRejectsGpuTensorsAndNamesTheFix) {
  COLROW_REQUIRE_GPU();
  Communicator& world = testing::world();
  Tensor x = Tensor::zeros({3}, gpu());
  Tensor gathered = Tensor::zeros({3 * world.size()}, gpu());
  expect_internal_error([&] { world.all_reduce_sum(x); }, "make_device_communicator",
                        "MPI all_reduce_sum of a GPU tensor");
  expect_internal_error([&] { world.broadcast(x, 0); }, "host collectives take host tensors",
                        "MPI broadcast of a GPU tensor");
  expect_internal_error([&] { world.all_gather(x, gathered); }, "got one on " + gpu().str(),
                        "MPI all_gather of GPU tensors");
}

TEST(StagedCommunicatorTest, SplitStagesTheNewGroupThroughTheSameGpu) {
  COLROW_REQUIRE_GPU();
  auto c = make_staged();
  std::unique_ptr<Communicator> half = c->split(0, c->rank(), "half");
  auto* staged = dynamic_cast<StagedCommunicator*>(half.get());
  ASSERT_NE(staged, nullptr);
  EXPECT_EQ(staged->device(), gpu());
  check_split(*c, gpu());
}

TEST(StagedCommunicatorTest, CpuTensorsGoStraightToMpi) {
  COLROW_REQUIRE_GPU();
  auto c = make_staged();
  check_every_collective(*c, Device::cpu());
  EXPECT_EQ(c->staging_allocations(), 0) << "CPU tensors were staged";
}

TEST(StagedCommunicatorTest, StagingBufferIsReusedForTheSameSize) {
  COLROW_REQUIRE_GPU();
  auto c = make_staged();
  Tensor x = input({1000}, c->rank(), 1).to(gpu());
  c->all_reduce_sum(x);
  const int64_t first = c->staging_allocations();
  EXPECT_EQ(first, c->size() > 1 ? 1 : 0) << "a group of one stages nothing";
  c->all_reduce_sum(x);
  EXPECT_EQ(c->staging_allocations(), first) << "a second call of the same size reallocated";
  Tensor small = input({3}, c->rank(), 2).to(gpu());
  c->all_reduce_max(small);
  c->broadcast(x, 0);
  EXPECT_EQ(c->staging_allocations(), first) << "a call that fits reallocated";
}

TEST(StagedCommunicatorTest, EveryCollectiveThroughMakeDeviceCommunicator) {
  COLROW_REQUIRE_GPU();
  Communicator& world = testing::world();
  std::unique_ptr<Communicator> c =
      make_device_communicator(world.split(0, world.rank(), "tp"), gpu(), CommKind::kStaged);
  ASSERT_NE(dynamic_cast<StagedCommunicator*>(c.get()), nullptr);
  check_every_collective(*c, gpu());
}

TEST(StagedCommunicatorTest, AutoStagesWhenRanksShareAGpu) {
  COLROW_REQUIRE_GPU();
  if (!ranks_share_a_gpu()) {
    GTEST_SKIP() << "every rank has a GPU of its own here, so auto picks NCCL "
                    "(nccl_communicator_test covers that)";
  }
  Communicator& world = testing::world();
  std::unique_ptr<Communicator> c =
      make_device_communicator(world.split(0, world.rank(), "tp"), gpu(), CommKind::kAuto);
  ASSERT_NE(dynamic_cast<StagedCommunicator*>(c.get()), nullptr);
  check_all_reduce(*c, gpu(), 1000, false);
}

}  // namespace
}  // namespace colrow
