// The warp emulation itself (support/warp_emulation.h), on what the kernel
// tests build on: every thread of every block runs once with its indices,
// in blocks of any shape; warps are 32 consecutive threads in x-fastest
// order, so a (32, 4) block's rows are its warps; a barrier some threads
// never reach is an error, not a hang; launch_independent refuses a kernel
// whose threads meet; blocks of partial warps are refused; a warp runs to the
// block's next barrier before the next warp starts, first to last in one
// block and last to first in the next, so a shared-memory read that lacks its
// barrier sees another value in one of them; a cp.async lands at its
// thread's wait, not before; blocks that take turns
// (kernels/cuda/block_turns.cuh) take them in the GPU's start order.
#include "support/warp_emulation.h"

#include <gtest/gtest.h>

#include <vector>

#include "colrow/core/error.h"

namespace colrow {
namespace {

namespace emulation = testing::emulation;

// Each thread of a (grid, block) launch writes its global linear index where
// that index says; every slot written exactly once.
void expect_every_thread_once(dim3 grid, dim3 block, bool independent) {
  const unsigned per_block = block.x * block.y * block.z;
  const unsigned blocks = grid.x * grid.y * grid.z;
  std::vector<int> hits(static_cast<size_t>(per_block) * blocks, 0);
  auto kernel = [&] {
    const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    ++hits[static_cast<size_t>(b) * per_block + t];
  };
  if (independent) {
    emulation::launch_independent(grid, block, kernel);
  } else {
    emulation::launch(grid, block, 0, kernel);
  }
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "thread " << i;
}

TEST(WarpEmulation, EveryThreadRunsOnceWithItsIndices) {
  for (bool independent : {false, true}) {
    SCOPED_TRACE(independent ? "launch_independent" : "launch");
    expect_every_thread_once(dim3(3), dim3(64), independent);
    expect_every_thread_once(dim3(2, 3), dim3(32, 4), independent);
    expect_every_thread_once(dim3(2, 1, 2), dim3(8, 2, 2), independent);
  }
}

// In a (32, 4) block a butterfly over 16, 8, 4, 2, 1 sums each row's 32
// values: the row is the warp.
TEST(WarpEmulation, WarpsAreConsecutiveThreadsOfATwoDimensionalBlock) {
  std::vector<int> sums(4, -1);
  emulation::launch(dim3(1), dim3(32, 4), 0, [&] {
    int v = static_cast<int>(threadIdx.y * 100 + threadIdx.x);
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (threadIdx.x == 0) sums[threadIdx.y] = v;
  });
  for (int row = 0; row < 4; ++row) EXPECT_EQ(sums[row], row * 3200 + 496) << "row " << row;
}

TEST(WarpEmulation, RefusesPartialWarpsAndDeadlocks) {
  EXPECT_THROW(emulation::launch(dim3(1), 48, 0, [] {}), InternalError);
  EXPECT_THROW(emulation::launch(dim3(1), 64, 0,
                                 [] {
                                   if (threadIdx.x < 32) __syncthreads();
                                 }),
               InternalError);
}

// launch_independent runs threads one after another to their end: a kernel
// whose threads meet must be launched with launch().
TEST(WarpEmulation, IndependentLaunchRefusesThreadsThatMeet) {
  EXPECT_THROW(emulation::launch_independent(dim3(1), 32, [] { __syncthreads(); }), InternalError);
  EXPECT_THROW(emulation::launch_independent(dim3(1), 32,
                                             [] { (void)__shfl_xor_sync(0xffffffffu, 1.0f, 1); }),
               InternalError);
  EXPECT_THROW(
      emulation::launch_independent(dim3(1), 32, [] { (void)emulation::dynamic_shared(); }),
      InternalError);
}

// Warp 1 writes a shared value that warp 0 reads. With the barrier between
// them every block reads it; without, warp 0 of block 0 (warps first to last)
// reads it before it is written, and warp 0 of block 1 (last to first) after.
TEST(WarpEmulation, AReadWithoutItsBarrierSeesAnotherValueInEveryOtherBlock) {
  for (bool barrier : {true, false}) {
    SCOPED_TRACE(barrier ? "with the barrier" : "without it");
    std::vector<int> seen(2, -1);
    emulation::launch(dim3(2), 64, sizeof(int), [&] {
      int* shared = reinterpret_cast<int*>(emulation::dynamic_shared());
      if (threadIdx.x == 32) *shared = 1;
      if (barrier) __syncthreads();
      if (threadIdx.x == 0) seen[blockIdx.x] = *shared;
    });
    EXPECT_EQ(seen[1], 1);
    if (barrier) {
      EXPECT_EQ(seen[0], 1);
    } else {
      EXPECT_NE(seen[0], 1) << "the race was hidden";
    }
  }
}

// A read of a cp.async's destination before the wait sees the old contents
// (the launch's pattern); after it, the copy (or zeros for a source size of 0).
TEST(WarpEmulation, CpAsyncLandsAtItsWait) {
  const float source[2] = {3.0f, 5.0f};
  float before = 0.0f, after = 0.0f, zero = 1.0f;
  emulation::launch(dim3(1), 32, 2 * sizeof(float), [&] {
    float* shared = reinterpret_cast<float*>(emulation::dynamic_shared());
    if (threadIdx.x == 0) {
      kernels::cuda::cp_async_4(shared, source, true);
      kernels::cuda::cp_async_4(shared + 1, source + 1, false);
      kernels::cuda::cp_async_commit();
      before = shared[0];
      kernels::cuda::cp_async_wait_all();
      after = shared[0];
      zero = shared[1];
    }
  });
  EXPECT_NE(before, 3.0f) << "the copy landed before its wait";
  EXPECT_EQ(after, 3.0f);
  EXPECT_EQ(zero, 0.0f);
}

// Each block appends its index in its turn: blocks run, and take their
// turns, in linear order (x fastest), as the GPU starts them.
TEST(WarpEmulation, BlocksTakeTurnsInTheirStartOrder) {
  int turn = 0;
  std::vector<unsigned> order;
  emulation::launch(dim3(3, 2), 32, 0, [&] {
    const unsigned mine = blockIdx.x + gridDim.x * blockIdx.y;
    if (threadIdx.x == 0) kernels::cuda::wait_for_turn(&turn, static_cast<int>(mine));
    __syncthreads();
    if (threadIdx.x == 0) order.push_back(mine);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) kernels::cuda::pass_turn(&turn);
  });
  EXPECT_EQ(order, (std::vector<unsigned>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(turn, 6);
}

}  // namespace
}  // namespace colrow
