// Turns: blocks of one launch that add into the same fp32 sums in a fixed
// order, so that the sums have the same bits on every run, where float
// atomics would add in whatever order the blocks arrive (the tensor-core
// attention's dQ, summed over key tiles: tensor_core_attention_kernels.cuh).
// A counter in global memory per sum, zeroed before the launch, counts the
// blocks that have added into it. The block whose turn comes next waits for
// the count to reach its own number (one thread spins), adds, and passes the
// turn on. A block only ever waits for blocks of a lower linear index, which
// the GPU starts no later than it (the property CUB's single-pass scan relies
// on), so a waiting block never keeps the one it waits for from running.
//
// In a kernel, every thread adds, then:
//   __threadfence(); __syncthreads(); if (threadIdx.x == 0) pass_turn(turn);
// and the next block: if (threadIdx.x == 0) wait_for_turn(turn, mine);
//   __syncthreads(); then reads the sums through load_l2.
// A test that defines COLROW_WARP_EMULATION supplies these functions for the
// host instead (tests/support/warp_emulation.h), where blocks run one after
// another: a turn that has not come when its block runs never comes, and
// that is an error there, not a wait.
#pragma once

#include <cuda_runtime.h>

#if !defined(COLROW_WARP_EMULATION)

namespace colrow::kernels::cuda {

// One thread of the block: returns once *turn == mine. With a barrier after
// it, the whole block then sees what the blocks before it wrote before they
// passed the turn (the acquire pairs with pass_turn's release).
__device__ inline void wait_for_turn(const int* turn, int mine) {
  int seen = 0;
  do {
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(seen) : "l"(turn) : "memory");
  } while (seen != mine);
}

// One thread of the block, after every thread's __threadfence() and a
// barrier: hands the turn to the next block.
__device__ inline void pass_turn(int* turn) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(turn) : "memory");
}

// Two fp32 partial sums, read and written through L2 only (ld/st .cg):
// another SM wrote them last, and this SM's L1 may still hold an older copy.
__device__ inline float2 load_l2(const float2* p) {
  return __ldcg(p);
}
__device__ inline void store_l2(float2* p, float2 v) {
  __stcg(p, v);
}

}  // namespace colrow::kernels::cuda

#endif  // !COLROW_WARP_EMULATION
