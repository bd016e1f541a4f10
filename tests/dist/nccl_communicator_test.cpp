// NcclCommunicator (through make_device_communicator): every collective on
// GPU tensors compared bitwise with MpiCommunicator on the same inputs (small
// integers, which sum exactly in any order) at 1, 3 and 1000 elements per
// rank; collectives queued back to back with no host synchronization; bad
// operands rejected on every rank before NCCL is called; split; CPU tensors
// passed to MPI; auto's choice; messages (held sends grouped with the next
// receive); started collectives on a side stream. NCCL refuses two ranks on one GPU, so with
// more ranks than GPUs on a node (np 2 on one GPU) these tests skip, except the
// one that checks that refusal.
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
#include "dist/staged/staged_communicator.h"
#include "support/gpu.h"
#include "support/test_world.h"

// Second line of every NCCL test that builds an NCCL communicator.
#define COLROW_REQUIRE_GPU_PER_RANK()                                               \
  do {                                                                              \
    if (::colrow::device_comm_testing::ranks_share_a_gpu()) {                       \
      GTEST_SKIP() << "NCCL test skipped: "                                         \
                   << ::colrow::device_comm_testing::node_placement().local_ranks   \
                   << " ranks on this node share " << ::colrow::cuda_device_count() \
                   << " GPU(s), and NCCL refuses two ranks on one GPU "             \
                      "(staged_communicator_test covers that case)";                \
    }                                                                               \
  } while (0)

namespace colrow {
namespace {

using namespace device_comm_testing;

// Over the world's ranks in the world's order, so MPI on the world is the reference.
std::unique_ptr<Communicator> make_nccl(CommKind kind = CommKind::kNccl) {
  Communicator& world = testing::world();
  return make_device_communicator(world.split(0, world.rank(), "tp"), gpu(), kind);
}

// Neither the host communicator nor a staged one: NCCL.
bool is_nccl(Communicator& c) {
  return dynamic_cast<MpiCommunicator*>(&c) == nullptr &&
         dynamic_cast<StagedCommunicator*>(&c) == nullptr;
}

TEST(NcclCommunicatorTest, AllReduceSumMatchesMpi) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  auto c = make_nccl();
  for (int64_t n : kCounts) check_all_reduce(*c, gpu(), n, false);
}

TEST(NcclCommunicatorTest, Bf16TensorsTravelAsFp32AndRoundOnce) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  auto c = make_nccl();
  testing::check_bf16_collectives(*c, "nccl", gpu());
}

TEST(NcclCommunicatorTest, Bf16WireSumsAreNcclsBf16) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  auto c = make_nccl();
  for (int64_t n : {2, 1001}) {
    testing::check_bf16_wire_sums(*c, "nccl", n, /*rounds_once=*/false, gpu());
  }
}

TEST(NcclCommunicatorTest, AllReduceMaxMatchesMpi) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  auto c = make_nccl();
  for (int64_t n : kCounts) check_all_reduce(*c, gpu(), n, true);
}

TEST(NcclCommunicatorTest, AllGatherMatchesMpi) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  auto c = make_nccl();
  for (int64_t n : kCounts) check_all_gather(*c, gpu(), n);
}

TEST(NcclCommunicatorTest, ReduceScatterSumMatchesMpi) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  auto c = make_nccl();
  for (int64_t n : kCounts) check_reduce_scatter_sum(*c, gpu(), n);
}

TEST(NcclCommunicatorTest, BroadcastFromEveryRootMatchesMpi) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  auto c = make_nccl();
  for (int64_t n : kCounts) check_broadcast_from_every_root(*c, gpu(), n);
}

TEST(NcclCommunicatorTest, QueuedCollectivesFollowStreamOrder) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  auto c = make_nccl();
  const int size = c->size();
  // A fill kernel, two all-reduces and a gather queued back to back; only the
  // final copy to the host waits. Each element: size * (size * (size + 1) / 2).
  Tensor x = Tensor::full({1000}, static_cast<float>(c->rank() + 1), gpu());
  c->all_reduce_sum(x);
  c->all_reduce_sum(x);
  Tensor gathered = Tensor::full({size * 1000}, -1.0f, gpu());
  c->all_gather(x, gathered);
  const float expected = static_cast<float>(size * (size * (size + 1) / 2));
  const std::vector<float> v = gathered.to_vector();
  int mismatches = 0;
  for (float value : v) mismatches += value != expected;
  EXPECT_EQ(mismatches, 0) << "elements differ from " << expected;
}

// A dp-style group (side_stream): started collectives run on a stream of
// their own in the order started; the compute stream's work queued before
// each start is in its operands, and what is queued after wait() sees its
// result, with no host synchronization in between. Several in flight at
// once, waited for in another order; each equals the blocking collective.
TEST(NcclCommunicatorTest, StartedCollectivesOnTheSideStreamKeepStreamOrder) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  Communicator& world = testing::world();
  auto c = make_device_communicator(world.split(0, world.rank(), "dp"), gpu(), CommKind::kNccl,
                                    /*point_to_point=*/false, /*side_stream=*/true);
  ASSERT_TRUE(is_nccl(*c));
  const int size = c->size(), rank = c->rank();
  for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{1} << 22}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    Tensor a = Tensor::zeros({n}, gpu());
    a.fill(static_cast<float>(rank + 1));  // queued on the compute stream just before
    Tensor b = Tensor::full({size * n}, static_cast<float>(2 * rank + 1), gpu());
    Tensor scattered = Tensor::full({n}, -1.0f, gpu());
    auto first = c->start_all_reduce_sum(a);
    auto second = c->start_reduce_scatter_sum(b, scattered);
    Tensor gathered = Tensor::full({size * n}, -1.0f, gpu());
    auto third = c->start_all_gather(scattered, gathered);  // reads the scatter's result
    third->wait();
    first->wait();
    second->wait();
    const Tensor copied = a.clone();  // a copy queued after the wait: sees the sum
    const float sum = static_cast<float>(size * (size + 1) / 2);
    const float odd_sum = static_cast<float>(size * size);  // 1 + 3 + ... + (2 size - 1)
    const std::vector<float> got_a = copied.to_vector(), got_s = scattered.to_vector(),
                             got_g = gathered.to_vector();
    int wrong = 0;
    for (float v : got_a) wrong += v != sum;
    for (float v : got_s) wrong += v != odd_sum;
    for (float v : got_g) wrong += v != odd_sum;
    EXPECT_EQ(wrong, 0);
  }
  // A handle dropped unwaited still orders the compute stream after it.
  Tensor x = Tensor::full({4096}, 1.0f, gpu());
  { auto dropped = c->start_all_reduce_sum(x); }
  EXPECT_EQ(x.clone().to_vector()[4095], static_cast<float>(size));
}

TEST(NcclCommunicatorTest, BadOperandsAreRejectedAtEverySize) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  auto c = make_nccl();
  check_rejects_bad_operands(*c, gpu());
  // Still usable afterwards: nobody was left inside NCCL.
  check_all_reduce(*c, gpu(), 3, false);
}

TEST(NcclCommunicatorTest, HeldSendsPairUpWithTheNextReceive) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  auto c = make_nccl();
  // Every rank sends first; NCCL pairs a send with a receive only in one
  // group, which the held send and the next receive form.
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1} << 22}) {
    check_ring_exchange(*c, gpu(), n);
    check_ring_exchange(*c, gpu(), n, DType::kBF16);  // ncclBfloat16 (pipeline activations)
    check_pair_exchange(*c, gpu(), n);
  }
  check_rejects_bad_peers(*c, gpu());
}

TEST(NcclCommunicatorTest, SplitBuildsAnNcclGroup) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  auto c = make_nccl();
  std::unique_ptr<Communicator> half = c->split(0, c->rank(), "half");
  EXPECT_TRUE(is_nccl(*half));
  check_split(*c, gpu());
}

TEST(NcclCommunicatorTest, CpuTensorsGoToMpi) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  auto c = make_nccl();
  check_every_collective(*c, Device::cpu());
}

TEST(NcclCommunicatorTest, AutoPicksNcclWhenEveryRankHasItsOwnGpu) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  auto c = make_nccl(CommKind::kAuto);
  EXPECT_TRUE(is_nccl(*c));
  check_all_reduce(*c, gpu(), 1000, false);
}

TEST(NcclCommunicatorTest, RanksSharingAGpuAreAConfigError) {
  COLROW_REQUIRE_GPU();
  if (!ranks_share_a_gpu()) GTEST_SKIP() << "every rank has a GPU of its own here";
  try {
    make_nccl();
    ADD_FAILURE() << "comm nccl with ranks sharing a GPU: no error";
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    // Names the sharing ranks: "ranks 0 and 1" at np 2 on one GPU.
    EXPECT_NE(message.find("but ranks "), std::string::npos) << message;
    if (testing::world().size() == 2) {
      EXPECT_NE(message.find("ranks 0 and 1"), std::string::npos) << message;
    }
    EXPECT_NE(message.find("share cuda:"), std::string::npos) << message;
    EXPECT_NE(message.find("--comm staged"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace colrow
