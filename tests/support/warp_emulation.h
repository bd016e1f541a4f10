// CUDA kernels run on the host, for tests on machines without a GPU (CI has
// none). Every thread of a block is a fiber (a stack of its own) of one host
// thread; __syncthreads, the xor shuffle and the warp instructions of
// kernels/cuda/warp_mma.cuh (mma.sync m16n8k16 with bf16 operands, ldmatrix
// .x4 with and without .trans, cp.async) are emulated with the semantics
// PTX's ISA documents, each lane's share exchanged through the warp at a
// barrier; blocks run one after another. Within a block, warps run one at a
// time from one __syncthreads to the next, first to last in even blocks and
// last to first in odd ones, and a cp.async lands at its thread's wait, so a
// missing barrier or wait changes the results instead of passing unseen.
// What it checks: the kernels' indexing, fragment layouts, masks, tiles and
// synchronization within a block, on host memory (so AddressSanitizer sees a
// read past a tensor). What it cannot: speed, the rounding of the tensor
// cores' own sums (each product here is summed in double and rounded once
// onto the accumulator), or races between blocks (block_turns.cuh's waits are
// the GPU's to prove).
//
// Use: define COLROW_WARP_EMULATION, include this header, then the kernels'
// header (kernels/cuda/warp_mma.cuh then leaves the PTX out, and
// shared_memory.cuh its declarations), and run a kernel with
// emulation::launch, or emulation::launch_independent when its threads never
// meet (element-wise kernels: no fibers, so millions of threads stay cheap).
#pragma once

#ifndef COLROW_WARP_EMULATION
#error "define COLROW_WARP_EMULATION before including support/warp_emulation.h"
#endif

// The CUDA headers first, as a host compiler takes them (__global__,
// __device__ and __host__ mean nothing there), before the names below.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

namespace colrow::testing::emulation {

// The built-in indices of the running thread.
struct ThreadIndices {
  uint3 thread, block, block_dim, grid_dim;
};
const ThreadIndices& current();
// The running thread's lane in its warp: warps are 32 consecutive threads in
// x-fastest order, as on a GPU, whatever the block's shape.
int lane_of_current();

char* dynamic_shared();  // the running block's dynamic shared memory
// The running block's static shared array declared at file:line, `bytes`
// long (the first thread to ask makes it; every thread gets the same).
void* static_shared(const char* file, int line, size_t bytes);
void sync_block();                                        // __syncthreads()
uint64_t exchange_in_warp(uint64_t bits, int from_lane);  // every lane gives, reads `from_lane`'s

// Runs kernel() as every thread of every block of `grid`, blocks in order,
// with `shared_bytes` of dynamic shared memory each (filled with a pattern, as
// a GPU's is never zero). Blocks hold whole warps. A barrier that some
// threads never reach is an InternalError naming it, not a hang.
void launch(dim3 grid, dim3 block, int64_t shared_bytes, const std::function<void()>& kernel);

// The same for a kernel whose threads never meet (no barrier, shuffle, warp
// instruction or shared memory): each thread runs to its end in turn, on the
// host's own stack. One that tries to meet the others is an InternalError
// saying to launch it with launch().
void launch_independent(dim3 grid, dim3 block, const std::function<void()>& kernel);

}  // namespace colrow::testing::emulation

#define threadIdx (::colrow::testing::emulation::current().thread)
#define blockIdx (::colrow::testing::emulation::current().block)
#define blockDim (::colrow::testing::emulation::current().block_dim)
#define gridDim (::colrow::testing::emulation::current().grid_dim)
#define __syncthreads() ::colrow::testing::emulation::sync_block()
#define COLROW_DYNAMIC_SHARED(name) char* name = ::colrow::testing::emulation::dynamic_shared()
#define COLROW_BLOCK_SHARED(type, name, dims)    \
  type(&name) dims = *static_cast<type(*) dims>( \
      ::colrow::testing::emulation::static_shared(__FILE__, __LINE__, sizeof(type dims)))
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

// __shfl_xor_sync over all 32 lanes (the kernels pass the full mask).
template <typename T>
T __shfl_xor_sync(unsigned /*mask*/, T value, int lane_mask) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  const int lane = ::colrow::testing::emulation::lane_of_current();
  bits = ::colrow::testing::emulation::exchange_in_warp(bits, lane ^ lane_mask);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

// CUDA's single-rounding intrinsics: the host's float operations round once
// to nearest, and the emulated tests are built with -ffp-contract=off, so no
// compiler fuses them into a multiply-add either.
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
// Blocks run one after another on one host thread: every write is seen.
inline void __threadfence() {}

namespace colrow::kernels::cuda {

// The functions of warp_mma.cuh, by the same names and layouts.
void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row);
void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* row);
// cp.async lands at the issuing thread's cp_async_wait_all, not before: a
// read of the tile that comes before its wait (and a barrier, for the other
// warps' rows) sees the old contents, as it may on a GPU.
void cp_async_16(uint16_t* dst, const uint16_t* src, bool fill);
void cp_async_4(float* dst, const float* src, bool fill);
inline void cp_async_commit() {}
void cp_async_wait_all();

// The functions of block_turns.cuh. Blocks run in the GPU's start order, one
// after another, so a block's turn has come when it runs or never will:
// wait_for_turn reports the second case and aborts (a kernel's thread cannot
// throw out of its fiber) instead of spinning forever.
void wait_for_turn(const int* turn, int mine);
inline void pass_turn(int* turn) {
  ++*turn;
}
inline float2 load_l2(const float2* p) {
  return *p;
}
inline void store_l2(float2* p, float2 v) {
  *p = v;
}

}  // namespace colrow::kernels::cuda
