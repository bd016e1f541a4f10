// The deterministic column sum shared by the bias gradient (bias_kernels.cuh)
// and the norm parameter gradients (norm_kernels.cuh): sums over the
// tokens of [tokens, d] operands without atomics, in an order that depends on
// the shape only, so the bits repeat from run to run.
//   Stage 1 (a kernel in each file, which knows what it sums): a block of
//   kColumns x kRowThreads threads over kColumns x V features and a chunk of
//   chunk_rows tokens; thread (c, r) reads V consecutive features at once (16 bytes
//   where the rows allow it, V = 1 otherwise) and adds tokens chunk_start +
//   r, + r + kRowThreads, ... of each in that order, then sum_row_threads
//   adds the kRowThreads sums of a feature in r order: one partial per
//   (chunk, feature), at partial[chunk * d + j]. V changes how the tokens are
//   read, not the order any feature's sum takes: both give the same bits.
//   Stage 2 (add_partials): each feature's partials added in chunk
//   order in the partials' type, rounded to fp32 once and added to the gradient.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"

namespace colrow::kernels::cuda::column_sums {

constexpr int kColumns = 32;         // threads across the features: a warp-wide coalesced row read
constexpr int kRowThreads = 8;       // threads down the tokens in a stage-1 block
constexpr int64_t kChunkRows = 128;  // tokens per stage-1 block, unless that makes too many
constexpr int64_t kMaxChunks = 65535;  // gridDim.y's limit
constexpr int kFinishThreads = 256;    // stage-2 threads per block, one per feature

// The stage-1 launch for [tokens, d] (tokens > 0), V features per thread: a
// function of the shape only, and so is each feature's sum order.
struct Layout {
  int64_t chunk_rows;  // tokens per chunk
  int64_t chunks;      // partials per feature
  dim3 grid;           // (feature blocks, chunks)
  dim3 block;          // (kColumns, kRowThreads)
};

template <int V>
inline Layout layout(int64_t tokens, int64_t d) {
  const int64_t spread = (tokens + kMaxChunks - 1) / kMaxChunks;
  const int64_t chunk_rows = spread > kChunkRows ? spread : kChunkRows;
  const int64_t chunks = (tokens + chunk_rows - 1) / chunk_rows;
  return {chunk_rows, chunks,
          dim3(colrow::cuda::blocks_for(d, kColumns * V), static_cast<unsigned int>(chunks)),
          dim3(kColumns, kRowThreads)};
}

// In a stage-1 block: the first of this thread's V features (>= d when idle;
// d is a multiple of V, so its features are all in or all out), and the
// tokens [begin, end) of the block's chunk.
template <int V>
__device__ __forceinline__ int64_t first_feature_of_thread() {
  return (static_cast<int64_t>(blockIdx.x) * kColumns + threadIdx.x) * V;
}
struct Chunk {
  int64_t begin, end;
};
__device__ __forceinline__ Chunk chunk_of_block(int64_t tokens, int64_t chunk_rows) {
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  return {begin, begin + chunk_rows < tokens ? begin + chunk_rows : tokens};
}

// After sum_row_threads: the feature this thread finishes, feature k of the
// block for thread k = (r, c) in row-major order, or -1 for none (the block
// has kColumns x V features, and kRowThreads x kColumns threads).
template <int V>
__device__ __forceinline__ int64_t finished_feature(int64_t d) {
  const int k = threadIdx.y * kColumns + threadIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumns * V + k;
  return k < kColumns * V && j < d ? j : -1;
}

// Stores this thread's V sums in `sums` and returns the kRowThreads sums of
// the feature it finishes (finished_feature), added in r order. Has a
// barrier: every thread of the block calls it.
template <typename T, int V>
__device__ __forceinline__ T sum_row_threads(T (&sums)[kRowThreads][kColumns * V],
                                             const T (&mine)[V]) {
  static_assert(V <= kRowThreads, "a block has a thread to finish each of its features");
#pragma unroll
  for (int i = 0; i < V; ++i) sums[threadIdx.y][threadIdx.x * V + i] = mine[i];
  __syncthreads();
  const int k = threadIdx.y * kColumns + threadIdx.x;
  if (k >= kColumns * V) return T(0);
  T total = sums[0][k];
  for (int r = 1; r < kRowThreads; ++r) total += sums[r][k];
  return total;
}

// Stage 2: grad[j] += fp32(sum over chunks c in order of partial[c * d + j]).
template <typename Acc>
__global__ void add_partials_kernel(const Acc* partial, int64_t chunks, int64_t d, float* grad) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= d) return;
  Acc sum = 0;
  for (int64_t c = 0; c < chunks; ++c) sum += partial[c * d + j];
  grad[j] += static_cast<float>(sum);
}

#ifndef COLROW_WARP_EMULATION  // the emulated tests launch the kernel themselves
template <typename Acc>
void add_partials(cudaStream_t stream, const Acc* partial, int64_t chunks, int64_t d, float* grad) {
  add_partials_kernel<Acc>
      <<<colrow::cuda::blocks_for(d, kFinishThreads), kFinishThreads, 0, stream>>>(partial, chunks,
                                                                                   d, grad);
  COLROW_CUDA_CHECK_LAUNCH();
}
#endif  // COLROW_WARP_EMULATION

}  // namespace colrow::kernels::cuda::column_sums
