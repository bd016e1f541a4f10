// ShmCommunicator against Open MPI's collectives on the same inputs:
//   - bitwise on small-integer data, where every partial sum is exact whatever
//     the order, at sizes that are not multiples of anything (1, 3, 17, 1001)
//     and across several slots (chunking);
//   - on random data, bitwise equal to the ranks' values added in rank order,
//     and within fp32 rounding of Open MPI's own all-reduce (whose order is
//     its own);
//   - bitwise equal to itself across repeated calls, across thread counts and
//     across ranks (one rank reduces each element, in rank order);
//   - back-to-back collectives of every kind, which reuse the two slot sets.
// Also: group_on_one_node, split, and operand errors thrown before anything is
// shared. make_device_communicator's choice is in device_communicator_test.
#include "dist/shm/shm_communicator.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sys/resource.h>

#include <csignal>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/core/philox.h"
#include "colrow/dist/device_communicator.h"
#include "dist/bf16_collectives.h"
#include "support/test_world.h"

namespace colrow {
namespace {

constexpr size_t kSmallSlot = 4096;  // 1024 floats: a few thousand elements span several chunks

MpiCommunicator& mpi_world() {
  return dynamic_cast<MpiCommunicator&>(testing::world());
}

// A fresh MPI group over the world (its own communicator, so it cannot match
// another test's messages), and a ShmCommunicator over another.
std::unique_ptr<MpiCommunicator> mpi_group() {
  return mpi_world().split_group(0, mpi_world().rank(), "mpi");
}
std::unique_ptr<ShmCommunicator> shm_group(size_t slot_bytes = kSmallSlot) {
  return std::make_unique<ShmCommunicator>(mpi_world().split_group(0, mpi_world().rank(), "shm"),
                                           slot_bytes);
}

Tensor make(int64_t n, const std::function<float(int64_t)>& value) {
  Tensor t = Tensor::empty({n});
  for (int64_t k = 0; k < n; ++k) t.data()[k] = value(k);
  return t;
}

// Rank-dependent small integers: sums over <= 16 ranks stay far below 2^24.
Tensor integers(int rank, int64_t n) {
  return make(n, [&](int64_t k) { return static_cast<float>((k * 7 + rank * 13) % 101 - 50); });
}

// Normal values, different on every rank.
Tensor randoms(int rank, int64_t n, uint64_t seed) {
  return make(n, [&](int64_t k) { return standard_normal(seed, static_cast<uint64_t>(rank), k); });
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), sizeof(float) * a.numel()) == 0;
}

const std::vector<int64_t> kSizes = {1, 3, 17, 1001, 1024, 4099};

// Chunks of at most 32K floats x ranks are summed whole on every rank (one
// barrier); larger ones slice by slice (two). kSizes with small slots take
// the first path, kLargeSizes with 1 MiB slots the second; there the chunks
// are cache-sized (32K-128K floats per rank), smaller than the slot, so
// 300001 floats take several.
const std::vector<int64_t> kLargeSizes = {40000, 300001};
constexpr size_t kLargeSlot = size_t{1} << 20;

// Shared memory belongs to one node: where the ranks span nodes (the TCP run
// of the suite) there is none to test (device_communicator_test checks that
// shm is refused there).
class ShmCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::world_on_one_node()) GTEST_SKIP() << "the ranks span nodes: no shared memory";
  }
};

TEST_F(ShmCommunicatorTest, Bf16TensorsTravelAsFp32AndRoundOnce) {
  auto shm = shm_group(kSmallSlot);
  testing::check_bf16_collectives(*shm, "shm");
}

// Half the bytes in the slots, the fp32 wire's result: one rounding of the
// fp32 sum in rank order, across chunks and both reduction paths.
TEST_F(ShmCommunicatorTest, Bf16WireSumsRoundOnce) {
  for (bool large : {false, true}) {
    auto shm = shm_group(large ? kLargeSlot : kSmallSlot);
    for (int64_t n : large ? kLargeSizes : kSizes) {
      if (n < 2) continue;
      testing::check_bf16_wire_sums(*shm, "shm", n, /*rounds_once=*/true);
    }
  }
}

TEST_F(ShmCommunicatorTest, AllReduceSumMatchesMpiBitwiseOnIntegers) {
  auto mpi = mpi_group();
  for (bool large : {false, true}) {
    auto shm = shm_group(large ? kLargeSlot : kSmallSlot);
    for (int64_t n : large ? kLargeSizes : kSizes) {
      Tensor a = integers(shm->rank(), n), b = integers(shm->rank(), n);
      shm->all_reduce_sum(a);
      mpi->all_reduce_sum(b);
      EXPECT_TRUE(same_bits(a, b)) << "n = " << n;
    }
  }
}

TEST_F(ShmCommunicatorTest, AllReduceMaxMatchesMpiBitwise) {
  auto mpi = mpi_group();
  for (bool large : {false, true}) {
    auto shm = shm_group(large ? kLargeSlot : kSmallSlot);
    for (int64_t n : large ? kLargeSizes : kSizes) {
      Tensor a = randoms(shm->rank(), n, 5), b = randoms(shm->rank(), n, 5);
      shm->all_reduce_max(a);
      mpi->all_reduce_max(b);
      EXPECT_TRUE(same_bits(a, b)) << "n = " << n;
    }
  }
}

TEST_F(ShmCommunicatorTest, AllReduceMaxKeepsNaN) {
  auto shm = shm_group();
  Tensor x = Tensor::full({5}, static_cast<float>(shm->rank()));
  if (shm->rank() == shm->size() - 1) x.data()[2] = NAN;
  shm->all_reduce_max(x);
  EXPECT_TRUE(std::isnan(x.data()[2]));
  EXPECT_EQ(x.data()[0], static_cast<float>(shm->size() - 1));
}

TEST_F(ShmCommunicatorTest, AllGatherMatchesMpiBitwise) {
  auto mpi = mpi_group();
  for (bool large : {false, true}) {
    auto shm = shm_group(large ? kLargeSlot : kSmallSlot);
    for (int64_t n : large ? kLargeSizes : kSizes) {
      const Tensor in = randoms(shm->rank(), n, 7);
      Tensor a = Tensor::empty({shm->size() * n}), b = Tensor::empty({shm->size() * n});
      shm->all_gather(in, a);
      mpi->all_gather(in, b);
      EXPECT_TRUE(same_bits(a, b)) << "n = " << n;
    }
  }
}

TEST_F(ShmCommunicatorTest, AllGatherKeepsTrailingShape) {
  auto shm = shm_group();
  const Tensor in = integers(shm->rank(), 15).view({5, 3});
  Tensor out = Tensor::empty({5 * shm->size(), 3});
  shm->all_gather(in, out);
  for (int q = 0; q < shm->size(); ++q) {
    EXPECT_TRUE(same_bits(out.slice(0, 5 * q, 5).clone(), integers(q, 15).view({5, 3})));
  }
}

TEST_F(ShmCommunicatorTest, ReduceScatterMatchesMpiBitwiseOnIntegers) {
  auto mpi = mpi_group();
  for (bool large : {false, true}) {
    auto shm = shm_group(large ? kLargeSlot : kSmallSlot);
    for (int64_t n : large ? kLargeSizes : kSizes) {
      const Tensor in = integers(shm->rank(), shm->size() * n);
      Tensor a = Tensor::empty({n}), b = Tensor::empty({n});
      shm->reduce_scatter_sum(in, a);
      mpi->reduce_scatter_sum(in, b);
      EXPECT_TRUE(same_bits(a, b)) << "n = " << n;
    }
  }
}

// Every rank's input summed per element in fp32, rank 0 first, then 1, 2, ...:
// the order the shared-memory collectives promise, so their result to the bit.
std::vector<float> rank_order_sum(Communicator& mpi, const Tensor& mine) {
  const int64_t n = mine.numel();
  Tensor all = Tensor::empty({mpi.size() * n});
  mpi.all_gather(mine, all);
  std::vector<float> sum(all.data(), all.data() + n);
  for (int q = 1; q < mpi.size(); ++q) {
    for (int64_t k = 0; k < n; ++k) sum[k] += all.data()[q * n + k];
  }
  return sum;
}

TEST_F(ShmCommunicatorTest, RandomSumsAddTheRanksInOrder) {
  auto mpi = mpi_group();
  auto shm = shm_group();
  const int64_t n = 5000;
  const Tensor input = randoms(shm->rank(), n, 11);
  const std::vector<float> expected = rank_order_sum(*mpi, input);
  Tensor x = input.clone();
  shm->all_reduce_sum(x);
  EXPECT_EQ(x.to_vector(), expected);
  // Open MPI may add in another order (a tree, a ring): each of the R - 1
  // additions rounds once, so two orders differ by at most
  // 2 (R - 1) u sum |x_r| (u = 2^-24), which bounds every element here.
  Tensor by_mpi = input.clone();
  mpi->all_reduce_sum(by_mpi);
  Tensor magnitude = input.clone();
  for (int64_t k = 0; k < n; ++k) magnitude.data()[k] = std::fabs(magnitude.data()[k]);
  mpi->all_reduce_sum(magnitude);
  const double u = std::ldexp(1.0, -24);
  for (int64_t k = 0; k < n; ++k) {
    ASSERT_NEAR(x.data()[k], by_mpi.data()[k],
                2.0 * (mpi->size() - 1) * u * magnitude.data()[k] * (1 + 1e-6))
        << "element " << k;
  }

  Tensor scattered = Tensor::empty({n / shm->size()});
  const Tensor full = randoms(shm->rank(), (n / shm->size()) * shm->size(), 12);
  const std::vector<float> expected_full = rank_order_sum(*mpi, full);
  shm->reduce_scatter_sum(full, scattered);
  const int64_t block = scattered.numel();
  EXPECT_EQ(scattered.to_vector(),
            std::vector<float>(expected_full.begin() + shm->rank() * block,
                               expected_full.begin() + (shm->rank() + 1) * block));
}

TEST_F(ShmCommunicatorTest, SameBitsOnEveryRunThreadCountAndRank) {
  auto mpi = mpi_group();
  auto shm = shm_group(kLargeSlot);  // 32K-128K-float chunks: the copies and sums go parallel
  const int64_t n = 300001;
  const Tensor input = randoms(shm->rank(), n, 13);
  const int threads = omp_get_max_threads();
  Tensor first;
  for (int t : {1, 2, 3, 1}) {
    omp_set_num_threads(t);
    Tensor x = input.clone();
    shm->all_reduce_sum(x);
    if (first.numel() <= 1) {
      first = x;
    } else {
      EXPECT_TRUE(same_bits(x, first)) << t << " threads";
    }
  }
  omp_set_num_threads(threads);
  // Every rank holds rank 0's result.
  Tensor root = first.clone();
  mpi->broadcast(root, 0);
  EXPECT_TRUE(same_bits(root, first));
}

TEST_F(ShmCommunicatorTest, BackToBackCollectivesReuseTheSlotsSafely) {
  auto mpi = mpi_group();
  auto shm = shm_group();
  const int ranks = shm->size(), me = shm->rank();
  for (int round = 0; round < 60; ++round) {
    const int64_t n = 1 + (round * 397) % 3000;  // one to three chunks
    Tensor a = integers(me + round, n), b = a.clone();
    shm->all_reduce_sum(a);
    mpi->all_reduce_sum(b);
    ASSERT_TRUE(same_bits(a, b)) << "all_reduce round " << round;
    const Tensor in = integers(me * 3 + round, n);
    Tensor ga = Tensor::empty({ranks * n}), gb = Tensor::empty({ranks * n});
    shm->all_gather(in, ga);
    mpi->all_gather(in, gb);
    ASSERT_TRUE(same_bits(ga, gb)) << "all_gather round " << round;
    Tensor sa = Tensor::empty({n}), sb = Tensor::empty({n});
    shm->reduce_scatter_sum(ga, sa);
    mpi->reduce_scatter_sum(gb, sb);
    ASSERT_TRUE(same_bits(sa, sb)) << "reduce_scatter round " << round;
  }
}

// start_* runs on the background thread: the results of the blocking calls,
// bitwise; several may be in flight (queued, run in the order started, waited
// for in any order), bf16 ones included; no blocking collective may run
// meanwhile; an unwaited handle waits when dropped.
TEST_F(ShmCommunicatorTest, StartedCollectivesEqualBlockingOnes) {
  auto shm = shm_group();
  const int ranks = shm->size(), me = shm->rank();
  for (int64_t n : kSizes) {
    Tensor a = randoms(me, n, 21), b = a.clone();
    auto pending = shm->start_all_reduce_sum(a);
    pending->wait();
    shm->all_reduce_sum(b);
    EXPECT_TRUE(same_bits(a, b)) << "all_reduce n = " << n;

    const Tensor in = randoms(me, n, 22);
    Tensor ga = Tensor::empty({ranks * n}), gb = Tensor::empty({ranks * n});
    shm->start_all_gather(in, ga)->wait();
    shm->all_gather(in, gb);
    EXPECT_TRUE(same_bits(ga, gb)) << "all_gather n = " << n;

    Tensor sa = Tensor::empty({n}), sb = Tensor::empty({n});
    { auto dropped = shm->start_reduce_scatter_sum(ga, sa); }  // waits when dropped
    shm->reduce_scatter_sum(gb, sb);
    EXPECT_TRUE(same_bits(sa, sb)) << "reduce_scatter n = " << n;
  }
  for (int64_t n : kSizes) {  // three in flight at once, one of them bf16
    Tensor a = randoms(me, n, 31), b = a.clone();
    Tensor h = randoms(me, ranks * n, 32).to(DType::kBF16), hb = h.clone();
    const Tensor in = randoms(me, ranks * n, 33);
    Tensor sa = Tensor::empty({n}), sb = Tensor::empty({n});
    auto first = shm->start_all_reduce_sum(a);
    auto second = shm->start_all_reduce_sum(h);
    auto third = shm->start_reduce_scatter_sum(in, sa);
    third->wait();  // any order
    first->wait();
    second->wait();
    shm->all_reduce_sum(b);
    shm->all_reduce_sum(hb);
    shm->reduce_scatter_sum(in, sb);
    EXPECT_TRUE(same_bits(a, b)) << "all_reduce in flight with others, n = " << n;
    EXPECT_EQ(h.to_vector(), hb.to_vector()) << "bf16 all_reduce in flight, n = " << n;
    EXPECT_TRUE(same_bits(sa, sb)) << "reduce_scatter in flight with others, n = " << n;
  }
  if (ranks > 1) {
    Tensor x = Tensor::full({64}, 1.0f), y = Tensor::full({64}, 1.0f);
    auto pending = shm->start_all_reduce_sum(x);
    auto more = shm->start_all_reduce_sum(y);
    EXPECT_THROW(shm->all_reduce_sum(y), InternalError);  // refused locally, nothing shared
    pending->wait();
    EXPECT_THROW(shm->barrier(), InternalError);  // one still in flight
    more->wait();
    EXPECT_EQ(x.data()[0], static_cast<float>(ranks));
    EXPECT_EQ(y.data()[0], static_cast<float>(ranks));
    shm->barrier();  // idle again
  }
}

TEST_F(ShmCommunicatorTest, EmptyTensorsAndGroupsOfOne) {
  auto shm = shm_group();
  Tensor empty = Tensor::empty({0});
  shm->all_reduce_sum(empty);  // no chunk, no barrier: returns on every rank
  auto alone = shm->split(shm->rank(), 0, "alone");
  EXPECT_EQ(alone->size(), 1);
  Tensor x = Tensor::full({4}, 2.0f);
  alone->all_reduce_sum(x);
  EXPECT_EQ(x.data()[3], 2.0f);
}

TEST_F(ShmCommunicatorTest, SplitKeepsSharedMemoryAndOrdersByKey) {
  auto shm = shm_group();
  if (shm->size() < 2) GTEST_SKIP() << "needs two ranks";
  // Reverse order: rank r of the world is size-1-r of the split group.
  auto reversed = shm->split(0, shm->size() - 1 - shm->rank(), "reversed");
  EXPECT_NE(dynamic_cast<ShmCommunicator*>(reversed.get()), nullptr);
  EXPECT_EQ(reversed->rank(), shm->size() - 1 - shm->rank());
  EXPECT_EQ(reversed->name(), "reversed");
  const Tensor in = Tensor::full({2}, static_cast<float>(reversed->rank()));
  Tensor out = Tensor::empty({2 * reversed->size()});
  reversed->all_gather(in, out);
  for (int q = 0; q < reversed->size(); ++q) EXPECT_EQ(out.data()[2 * q], static_cast<float>(q));
}

TEST_F(ShmCommunicatorTest, WrongOperandsThrowBeforeSharing) {
  auto shm = shm_group();
  Tensor matrix = Tensor::zeros({4, 6});
  Tensor columns = matrix.slice(1, 0, 3);  // not contiguous
  EXPECT_THROW(shm->all_reduce_sum(columns), InternalError);
  Tensor out = Tensor::empty({shm->size() * 4 + 1});
  EXPECT_THROW(shm->all_gather(Tensor::zeros({4}), out), InternalError);
  Tensor small = Tensor::empty({1});
  EXPECT_THROW(shm->reduce_scatter_sum(Tensor::zeros({shm->size() * 2 + 1}), small), InternalError);
  // Still in step: a collective after the refusals works.
  Tensor x = Tensor::full({3}, 1.0f);
  shm->all_reduce_sum(x);
  EXPECT_EQ(x.data()[0], static_cast<float>(shm->size()));
}

// A segment /dev/shm cannot hold: rank 0's posix_fallocate fails (made to
// here by a file-size limit, its SIGXFSZ ignored). Every rank throws, none
// hangs: rank 0 names the call and the reason, the others name rank 0.
// --comm shm reports it; --comm auto falls back to Open MPI.
TEST_F(ShmCommunicatorTest, SegmentThatCannotBeMadeFailsOnEveryRank) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  void (*saved_handler)(int) = SIG_DFL;
  if (mpi_world().rank() == 0) {
    saved_handler = std::signal(SIGXFSZ, SIG_IGN);
    const rlimit small{4096, saved.rlim_max};
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  }
  try {
    shm_group(size_t{1} << 20);
    ADD_FAILURE() << "a segment larger than the file-size limit was made";
  } catch (const BackendError& e) {
    const std::string expected = mpi_world().rank() == 0
                                     ? "creating the segment on rank 0: posix_fallocate failed"
                                     : "creating the segment failed on rank 0";
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  if (mpi_world().size() > 1) {
    EXPECT_THROW(make_device_communicator(mpi_group(), Device::cpu(), CommKind::kShm),
                 BackendError);
    auto fallback = make_device_communicator(mpi_group(), Device::cpu(), CommKind::kAuto);
    EXPECT_NE(dynamic_cast<MpiCommunicator*>(fallback.get()), nullptr);
    Tensor x = Tensor::full({3}, 1.0f);
    fallback->all_reduce_sum(x);
    EXPECT_EQ(x.data()[0], static_cast<float>(mpi_world().size()));
  }
  if (mpi_world().rank() == 0) {
    setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, saved_handler);
  }
}

TEST(ShmNodeDetection, AgreesWithTheLauncher) {
  EXPECT_EQ(group_on_one_node(mpi_world().handle()), testing::world_on_one_node());
}

}  // namespace
}  // namespace colrow
