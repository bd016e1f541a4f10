// What the fused attention kernels (flash_attention.cu, fp32 arithmetic on
// CUDA cores; tensor_core_attention.cu, bf16 products on tensor cores) share
// on the host side of a launch: their operands from tensors, the softmax
// scale, backward's D_i = dO_i . O_i, and the shared memory a launch asks
// for. The tiles themselves: tile_geometry.cuh. A host compiler takes it
// too, the launches left out (tests/kernels/cuda/emulated launch the kernels
// through the warp emulation).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "colrow/core/tensor.h"

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/attention.h"
#include "kernels/cuda/reductions.cuh"
#include "kernels/cuda/tile_geometry.cuh"
#include "kernels/cuda/vectors.cuh"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {

inline float softmax_scale(int64_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

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

#ifndef COLROW_WARP_EMULATION  // the emulated tests launch the kernels themselves
// Lets `kernel` take `bytes` of dynamic shared memory (above 48 KiB needs it).
template <typename Kernel>
void allow_shared_bytes(Kernel kernel, int64_t bytes) {
  COLROW_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes)));
}
#endif  // COLROW_WARP_EMULATION

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

// rows_dot's launch: 8 warps, one (token, head) each, per block.
constexpr int kRowsDotWarps = 8;

#ifndef COLROW_WARP_EMULATION
// Launches rows_dot over every (token, head) on `stream`.
template <typename E>
void launch_rows_dot(const E* dout, int64_t lddo, const E* out, int64_t ldo, int64_t tokens,
                     int64_t seq, int64_t n_head, int64_t head_dim, float* d, cudaStream_t stream) {
  rows_dot<<<colrow::cuda::blocks_for(tokens * n_head, kRowsDotWarps), kRowsDotWarps * kWarp, 0,
             stream>>>(dout, lddo, out, ldo, tokens, seq, n_head, head_dim, d);
  COLROW_CUDA_CHECK_LAUNCH();
}
#endif  // COLROW_WARP_EMULATION

}  // namespace colrow::kernels::cuda
