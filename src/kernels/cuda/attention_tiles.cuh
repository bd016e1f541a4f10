// What the fused attention kernels (flash_attention.cu, fp32 arithmetic on
// CUDA cores; tensor_core_attention.cu, bf16 products on tensor cores) share:
// their operands, tiles of 64 queries against 64 keys, which tiles meet under
// the causal mask and the sliding window, the softmax scale, backward's
// D_i = dO_i . O_i, and the shared memory a launch asks for.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "colrow/core/tensor.h"

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/attention_window.h"
#include "kernels/checks/attention.h"
#include "kernels/cuda/reductions.cuh"
#include "kernels/cuda/vectors.cuh"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {

constexpr int kTile = 64;             // queries per query tile, keys per key tile
constexpr int64_t kMaxTiles = 65535;  // query tiles ride on gridDim.y

__host__ __device__ inline int64_t key_tiles(int64_t seq) {
  return (seq + kTile - 1) / kTile;
}

inline float softmax_scale(int64_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

// q, k, v as E (float, or uint16_t for bf16 bits) and what every kernel
// needs to know of them.
template <typename E>
struct Operands {
  const E* q;
  const E* k;
  const E* v;
  int64_t ldq, ldk, ldv;
  int64_t seq, n_head, group, head_dim, window;
  float scale;
  bool aligned;  // every row of q, k, v starts on 16 bytes (vector loads may read it)
};

// q, k, v as E (with_element_type checked they share it).
template <typename E>
Operands<E> operands(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionDims& d,
                     int64_t window) {
  return {elements<E>(q),
          elements<E>(k),
          elements<E>(v),
          q.row_stride(),
          k.row_stride(),
          v.row_stride(),
          d.seq,
          d.n_head,
          d.group,
          d.head_dim,
          window,
          softmax_scale(d.head_dim),
          aligned_rows(q) && aligned_rows(k) && aligned_rows(v)};
}

// Lets `kernel` take `bytes` of dynamic shared memory (above 48 KiB needs it).
template <typename Kernel>
void allow_shared_bytes(Kernel kernel, int64_t bytes) {
  COLROW_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes)));
}

// Query tile qt meets key tile kt when some query of qt sees some key of kt:
// the diagonal bounds kt <= qt, and the window's first key of qt's first
// query (the smallest of the tile's) must not lie past kt's last key.
__host__ __device__ inline int64_t first_key_tile(int64_t qt, int64_t window) {
  return first_visible_key(qt * kTile, window) / kTile;
}
__host__ __device__ inline bool tiles_meet(int64_t kt, int64_t qt, int64_t window) {
  return kt <= qt && kt >= first_key_tile(qt, window);
}

__device__ inline bool visible(int64_t i, int64_t j, int64_t seq, int64_t window) {
  return i < seq && j <= i && j >= first_visible_key(i, window);
}

// d[b, h, i] = dO . O over head h of token b*T + i, in fp32: one warp per
// (token, head).
template <typename E>
__global__ void rows_dot(const E* dout, int64_t lddo, const E* out, int64_t ldo, int64_t tokens,
                         int64_t seq, int64_t n_head, int64_t head_dim, float* d) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (w >= tokens * n_head) return;  // the whole warp leaves together
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t row = w / n_head, h = w % n_head;
  const E* x = dout + row * lddo + h * head_dim;
  const E* y = out + row * ldo + h * head_dim;
  float sum = 0.0f;
  for (int64_t e = lane; e < head_dim; e += kWarp) sum = fmaf(widen(x[e]), widen(y[e]), sum);
  sum = warp_sum(sum);
  if (lane == 0) d[((row / seq) * n_head + h) * seq + row % seq] = sum;
}

// Launches rows_dot over every (token, head) on `stream`.
template <typename E>
void launch_rows_dot(const E* dout, int64_t lddo, const E* out, int64_t ldo, int64_t tokens,
                     int64_t seq, int64_t n_head, int64_t head_dim, float* d, cudaStream_t stream) {
  constexpr int kRowsPerBlock = 8;
  rows_dot<<<colrow::cuda::blocks_for(tokens * n_head, kRowsPerBlock), kRowsPerBlock * kWarp, 0,
             stream>>>(dout, lddo, out, ldo, tokens, seq, n_head, head_dim, d);
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
