// NcclCommunicator (through make_device_communicator): every collective on
// GPU tensors compared bitwise with MpiCommunicator on the same inputs (small
// integers, which sum exactly in any order) at 1, 3 and 1000 elements per
// rank; collectives queued back to back with no host synchronization; bad
// operands rejected on every rank before NCCL is called; split; CPU tensors
// passed to MPI; auto's choice. NCCL refuses two ranks on one GPU, so with
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
#include "colrow/dist/staged_communicator.h"
#include "support/gpu.h"
#include "support/test_world.h"

// Second line of every NCCL test that builds an NCCL communicator.
#define COLROW_REQUIRE_GPU_PER_RANK()                                                 \
  do {                                                                                \
    if (::colrow::ranks_share_a_gpu()) {                                              \
      GTEST_SKIP() << "NCCL test skipped: " << ::colrow::node_placement().local_ranks \
                   << " ranks on this node share " << ::colrow::cuda_device_count()   \
                   << " GPU(s), and NCCL refuses two ranks on one GPU "               \
                      "(staged_communicator_test covers that case)";                  \
    }                                                                                 \
  } while (0)

namespace colrow {
namespace {

constexpr int64_t kCounts[] = {1, 3, 1000};  // elements per rank

struct NodePlacement {
  int local_rank = 0;
  int local_ranks = 1;
};

// This rank's place on its node. Collective over the world on the first call,
// which every rank makes in the same test.
NodePlacement node_placement() {
  static const NodePlacement placement = [] {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    NodePlacement p;
    MPI_Comm_rank(node, &p.local_rank);
    MPI_Comm_size(node, &p.local_ranks);
    MPI_Comm_free(&node);
    return p;
  }();
  return placement;
}

Device gpu() {
  return testing::test_gpu(node_placement().local_rank);
}

// Whether a node runs more ranks than it has GPUs, so that two ranks use one
// (test_gpu is local rank mod GPUs). The same answer on every rank.
bool ranks_share_a_gpu() {
  static const bool shared = [] {
    int mine = node_placement().local_ranks > cuda_device_count() ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &mine, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return mine != 0;
  }();
  return shared;
}

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

// Rank q's input on the host: small integers of both signs, different per rank.
Tensor input(const Shape& shape, int q, int salt) {
  Tensor t = Tensor::empty(shape);
  for (int64_t k = 0; k < t.numel(); ++k) {
    t.data()[k] = static_cast<float>((q + 1) * (k % 13 - 6) + 7 * q + salt * (k % 5));
  }
  return t;
}

// `actual` (any device) must hold exactly the bits of `reference` (the host).
void expect_bitwise(const Tensor& actual, const Tensor& reference, const std::string& what) {
  ASSERT_EQ(actual.shape(), reference.shape()) << what;
  const std::vector<float> a = actual.to_vector(), r = reference.to_vector();
  int mismatches = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    if (std::memcmp(&a[k], &r[k], sizeof(float)) == 0) continue;
    if (++mismatches <= 5) {
      ADD_FAILURE() << what << ": element " << k << " is " << a[k] << ", MPI gives " << r[k];
    }
  }
  EXPECT_EQ(mismatches, 0) << what << ": elements that differ from MPI";
}

std::string label(const char* op, Communicator& c, Device d, int64_t n) {
  return std::string(op) + " of " + std::to_string(n) + " on " + d.str() + " over " + c.name();
}

// Each check runs the collective through `c` on tensors on `d`, and through the
// MPI world on host copies of the same inputs.

void check_all_reduce(Communicator& c, Device d, int64_t n, bool max) {
  Tensor reference = input({n}, c.rank(), 1);
  Tensor x = reference.clone().to(d);
  if (max) {
    testing::world().all_reduce_max(reference);
    c.all_reduce_max(x);
  } else {
    testing::world().all_reduce_sum(reference);
    c.all_reduce_sum(x);
  }
  EXPECT_EQ(x.device(), d);
  expect_bitwise(x, reference, label(max ? "all_reduce_max" : "all_reduce_sum", c, d, n));
}

void check_all_gather(Communicator& c, Device d, int64_t n) {
  const Tensor in_host = input({n}, c.rank(), 2);
  Tensor reference = Tensor::full({c.size() * n}, -1.0f);
  testing::world().all_gather(in_host, reference);
  const Tensor in = in_host.clone().to(d);
  Tensor out = Tensor::full({c.size() * n}, -1.0f, d);
  c.all_gather(in, out);
  expect_bitwise(out, reference, label("all_gather", c, d, n));
  expect_bitwise(in, in_host, label("all_gather leaves its input alone", c, d, n));
}

void check_reduce_scatter_sum(Communicator& c, Device d, int64_t n) {
  const Tensor in_host = input({c.size() * n}, c.rank(), 3);
  Tensor reference = Tensor::full({n}, -1.0f);
  testing::world().reduce_scatter_sum(in_host, reference);
  Tensor out = Tensor::full({n}, -1.0f, d);
  c.reduce_scatter_sum(in_host.clone().to(d), out);
  expect_bitwise(out, reference, label("reduce_scatter_sum", c, d, n));
}

void check_broadcast_from_every_root(Communicator& c, Device d, int64_t n) {
  for (int root = 0; root < c.size(); ++root) {
    Tensor reference = input({n}, c.rank(), 4);
    Tensor x = reference.clone().to(d);
    testing::world().broadcast(reference, root);
    c.broadcast(x, root);
    expect_bitwise(x, reference, label("broadcast", c, d, n) + " from " + std::to_string(root));
  }
}

void check_every_collective(Communicator& c, Device d) {
  for (int64_t n : kCounts) {
    check_all_reduce(c, d, n, false);
    check_all_reduce(c, d, n, true);
    check_all_gather(c, d, n);
    check_reduce_scatter_sum(c, d, n);
    check_broadcast_from_every_root(c, d, n);
  }
}

// The error must be thrown on every rank before anything is sent, or the test hangs.
void expect_internal_error(const std::function<void()>& call, const std::string& part,
                           const std::string& what) {
  try {
    call();
    ADD_FAILURE() << what << ": no error";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << what << ": " << e.what();
  }
}

void check_rejects_bad_operands(Communicator& c, Device d) {
  const int size = c.size();
  Tensor strided = Tensor::zeros({4, 6}, d).slice(1, 0, 3);  // [4, 3], rows 6 apart
  Tensor strided_in = Tensor::zeros({4 * size, 6}, d).slice(1, 0, 3);
  Tensor block = Tensor::zeros({4, 3}, d);
  Tensor gathered = Tensor::zeros({4 * size, 3}, d);
  expect_internal_error([&] { c.all_reduce_sum(strided); }, "contiguous", "all_reduce_sum");
  expect_internal_error([&] { c.all_reduce_max(strided); }, "contiguous", "all_reduce_max");
  expect_internal_error([&] { c.broadcast(strided, 0); }, "contiguous", "broadcast");
  expect_internal_error([&] { c.all_gather(strided, gathered); }, "contiguous", "all_gather");
  expect_internal_error([&] { c.reduce_scatter_sum(strided_in, block); }, "contiguous",
                        "reduce_scatter_sum");
  Tensor too_big = Tensor::zeros({4 * size + 1, 3}, d);
  expect_internal_error([&] { c.all_gather(block, too_big); }, "must hold", "all_gather shape");
  Tensor host_block = Tensor::zeros({4, 3});
  expect_internal_error([&] { c.all_gather(host_block, gathered); }, "all on the host or all on",
                        "all_gather from the host into the GPU");
}

void check_split(Communicator& c, Device d) {
  const int size = c.size(), rank = c.rank();
  std::unique_ptr<Communicator> reversed = c.split(0, size - 1 - rank, "reversed");
  EXPECT_EQ(reversed->size(), size);
  EXPECT_EQ(reversed->rank(), size - 1 - rank);
  EXPECT_EQ(reversed->name(), "reversed");
  // [2, 3] per rank: block b of the gather comes from world rank size - 1 - b.
  Tensor in = Tensor::full({2, 3}, static_cast<float>(rank), d);
  Tensor out = Tensor::full({2 * size, 3}, -1.0f, d);
  reversed->all_gather(in, out);
  const std::vector<float> v = out.to_vector();
  for (size_t k = 0; k < v.size(); ++k) {
    EXPECT_EQ(v[k], static_cast<float>(size - 1 - static_cast<int>(k / 6))) << "element " << k;
  }
  check_all_reduce(*reversed, d, 1000, false);

  // Groups of one return at once; gather and scatter copy.
  std::unique_ptr<Communicator> alone = c.split(rank, 0, "alone");
  EXPECT_EQ(alone->size(), 1);
  const Tensor mine = input({3}, rank, 5);
  Tensor x = mine.clone().to(d);
  alone->all_reduce_sum(x);
  expect_bitwise(x, mine, "all_reduce_sum over a group of one");
  Tensor copied = Tensor::full({3}, -1.0f, d);
  alone->all_gather(x, copied);
  expect_bitwise(copied, mine, "all_gather over a group of one");
  copied.fill(-1.0f);
  alone->reduce_scatter_sum(x, copied);
  expect_bitwise(copied, mine, "reduce_scatter_sum over a group of one");
}

TEST(NcclCommunicatorTest, AllReduceSumMatchesMpi) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  auto c = make_nccl();
  for (int64_t n : kCounts) check_all_reduce(*c, gpu(), n, false);
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

TEST(NcclCommunicatorTest, BadOperandsAreRejectedAtEverySize) {
  COLROW_REQUIRE_GPU();
  COLROW_REQUIRE_GPU_PER_RANK();
  auto c = make_nccl();
  check_rejects_bad_operands(*c, gpu());
  // Still usable afterwards: nobody was left inside NCCL.
  check_all_reduce(*c, gpu(), 3, false);
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
