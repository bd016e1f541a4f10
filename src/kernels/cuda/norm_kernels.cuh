// The LayerNorm and RMSNorm kernels on the GPU (norm.h; launched by norm.cu),
// with the expressions of kernels/cpu/norm.cpp. Row kernels: one warp per token row; each lane sums
// its strided share of the row in double and a butterfly shuffle adds the 32
// lane sums, so every lane ends with the same bits. Parameter gradients: the
// two-stage column sum of kernels/cuda/column_sums.cuh in double, no atomics,
// rounded once into the fp32 gradient as the CPU does. x, the weights, dy, y
// and dx are fp32 or bf16 (E, kernels/elements.h), bf16 read natively and
// each output rounded once; the statistics and parameter gradients stay fp32.
// A fused residual add (kernels/cpu/norm.h) is one more operand of the row
// kernels: forward writes the sum's row and normalizes it from there (the
// lane's own elements, still in L1), backward adds the residual's gradient
// into dx as it writes it.
// A lane takes V consecutive elements at a time (kernels/cuda/vectors.cuh):
// 16 bytes where every row the kernel touches allows it, one element
// otherwise. The sums stay in double, where fp32 values and their products
// lose next to nothing; each path sums in a fixed order (the same bits every
// run), and the row kernels' two paths may differ in a last bit (the
// parameter gradients' give the same bits either way: column_sums.cuh).
// A host compiler takes this header too: tests/kernels/cuda/norm_test runs
// these kernels on the CPU through the warp emulation as well as on a GPU.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "colrow/core/bfloat16.h"
#include "colrow/core/tensor.h"
#include "core/cuda/cuda_context.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/reductions.cuh"
#include "kernels/cuda/shared_memory.cuh"
#include "kernels/cuda/vectors.cuh"
#include "kernels/elements.h"

namespace colrow::kernels::cuda::norm_kernels {

constexpr int kRowsPerBlock = 4;  // warps (rows) per row-kernel block

// Row kernels: blockDim = (32, kRowsPerBlock), one warp per token row.
const dim3 kRowBlock(kWarp, kRowsPerBlock);
inline unsigned int row_blocks(int64_t tokens) {
  return colrow::cuda::blocks_for(tokens, kRowsPerBlock);
}

// The token row of this warp (blockDim = (32, kRowsPerBlock)); >= tokens when idle.
__device__ __forceinline__ int64_t warp_row() {
  return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
}

// A fused residual add (kernels/cpu/norm.h): the residual's row and the sum's
// row this warp writes, or nulls.
template <typename E>
struct ResidualRows {
  const E* residual = nullptr;
  int64_t ldr = 0;
  E* sum = nullptr;
  int64_t lds = 0;
};

// The chunk of the row the norm reads at j: x's, or x + residual rounded
// once and written to the sum's row (read back by this lane only).
// __fadd_rn: never merged into a multiply-add, so the separate add's bits.
template <int V, typename E>
__device__ __forceinline__ void input_chunk(const E* xr, const ResidualRows<E>& add, int64_t t,
                                            int64_t j, float (&out)[V]) {
  load_chunk<V>(xr + j, out);
  if (add.residual == nullptr) return;
  float r[V];
  load_chunk<V>(add.residual + t * add.ldr + j, r);
  alignas(16) E sum[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    sum[i] = narrow<E>(__fadd_rn(out[i], r[i]));
    out[i] = widen(sum[i]);
  }
  store_chunk<V>(add.sum + t * add.lds + j, sum);
}

// dx's chunk: the norm's gradients v rounded to E, plus the residual's
// gradient when there is one (rounded again, as the separate add does).
template <int V, typename E>
__device__ __forceinline__ void store_input_grad(const float (&v)[V], const E* dresr, int64_t j,
                                                 E* dxr) {
  alignas(16) E out[V];
  float dres[V] = {};
  if (dresr != nullptr) load_chunk<V>(dresr + j, dres);
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const E own = narrow<E>(v[i]);
    out[i] = dresr == nullptr ? own : narrow<E>(__fadd_rn(dres[i], widen(own)));
  }
  store_chunk<V>(dxr + j, out);
}

template <typename E>
inline ResidualRows<E> residual_rows(const Tensor* residual, Tensor* sum) {
  if (residual == nullptr) return {};
  return {elements<E>(*residual), residual->row_stride(), elements<E>(*sum), sum->row_stride()};
}

template <typename E, int V>
__global__ void layer_norm_forward_kernel(const E* x, int64_t ldx, ResidualRows<E> add,
                                          const E* gamma, const E* beta, float eps, int64_t tokens,
                                          int64_t d, E* y, int64_t ldy, float* mean, float* rstd) {
  const int64_t t = warp_row();
  if (t >= tokens) return;  // a whole warp leaves together: the shuffles stay full
  const E* xr = x + t * ldx;
  const int64_t chunks = d / V;
  double sum = 0.0;
  for (int64_t c = threadIdx.x; c < chunks; c += kWarp) {
    float v[V];
    input_chunk<V>(xr, add, t, c * V, v);
#pragma unroll
    for (int i = 0; i < V; ++i) sum += v[i];
  }
  const E* in = add.residual != nullptr ? add.sum + t * add.lds : xr;  // the sum, once written
  const double mu = warp_sum(sum) / static_cast<double>(d);
  // Second pass about the mean: no cancellation when |mean| >> std.
  double sq = 0.0;
  for (int64_t c = threadIdx.x; c < chunks; c += kWarp) {
    float v[V];
    load_chunk<V>(in + c * V, v);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const double dev = v[i] - mu;
      sq += dev * dev;
    }
  }
  sq = warp_sum(sq);
  const float m = static_cast<float>(mu);
  const float r = static_cast<float>(1.0 / sqrt(sq / static_cast<double>(d) + eps));
  if (threadIdx.x == 0) {
    mean[t] = m;
    rstd[t] = r;
  }
  E* yr = y + t * ldy;
  for (int64_t c = threadIdx.x; c < chunks; c += kWarp) {
    float v[V], g[V], b[V];
    load_chunk<V>(in + c * V, v);
    load_chunk<V>(gamma + c * V, g);
    load_chunk<V>(beta + c * V, b);
    alignas(16) E out[V];
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = narrow<E>((v[i] - m) * r * g[i] + b[i]);
    store_chunk<V>(yr + c * V, out);
  }
}

template <typename E, int V>
__global__ void layer_norm_dx_kernel(const E* x, int64_t ldx, const E* gamma, const float* mean,
                                     const float* rstd, const E* dy, int64_t lddy, int64_t tokens,
                                     int64_t d, const E* dresidual, int64_t lddr, E* dx,
                                     int64_t lddx) {
  const int64_t t = warp_row();
  if (t >= tokens) return;
  const E *xr = x + t * ldx, *dyr = dy + t * lddy;
  const float m = mean[t], r = rstd[t];
  const int64_t chunks = d / V;
  double sum_g = 0.0, sum_gx = 0.0;
  for (int64_t c = threadIdx.x; c < chunks; c += kWarp) {
    float xv[V], gv[V], dyv[V];
    load_chunk<V>(xr + c * V, xv);
    load_chunk<V>(gamma + c * V, gv);
    load_chunk<V>(dyr + c * V, dyv);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float gj = dyv[i] * gv[i];
      const float xhat = (xv[i] - m) * r;
      sum_g += gj;
      sum_gx += static_cast<double>(gj) * xhat;
    }
  }
  const double inv_d = 1.0 / static_cast<double>(d);
  const float mean_g = static_cast<float>(warp_sum(sum_g) * inv_d);
  const float mean_gx = static_cast<float>(warp_sum(sum_gx) * inv_d);
  E* dxr = dx + t * lddx;
  const E* dresr = dresidual != nullptr ? dresidual + t * lddr : nullptr;
  for (int64_t c = threadIdx.x; c < chunks; c += kWarp) {
    float xv[V], gv[V], dyv[V], out[V];
    load_chunk<V>(xr + c * V, xv);
    load_chunk<V>(gamma + c * V, gv);
    load_chunk<V>(dyr + c * V, dyv);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float xhat = (xv[i] - m) * r;
      out[i] = r * (dyv[i] * gv[i] - mean_g - xhat * mean_gx);
    }
    store_input_grad<V>(out, dresr, c * V, dxr);
  }
}

template <typename E, int V>
__global__ void rms_norm_forward_kernel(const E* x, int64_t ldx, ResidualRows<E> add,
                                        const E* weight, float eps, int64_t tokens, int64_t d, E* y,
                                        int64_t ldy, float* rstd) {
  const int64_t t = warp_row();
  if (t >= tokens) return;
  const E* xr = x + t * ldx;
  const int64_t chunks = d / V;
  double sq = 0.0;
  for (int64_t c = threadIdx.x; c < chunks; c += kWarp) {
    float v[V];
    input_chunk<V>(xr, add, t, c * V, v);
#pragma unroll
    for (int i = 0; i < V; ++i) sq += static_cast<double>(v[i]) * v[i];
  }
  const E* in = add.residual != nullptr ? add.sum + t * add.lds : xr;
  sq = warp_sum(sq);
  const float r = static_cast<float>(1.0 / sqrt(sq / static_cast<double>(d) + eps));
  if (threadIdx.x == 0) rstd[t] = r;
  E* yr = y + t * ldy;
  // HF order: weight * (x * rsqrt(mean(x^2) + eps)).
  for (int64_t c = threadIdx.x; c < chunks; c += kWarp) {
    float v[V], w[V];
    load_chunk<V>(in + c * V, v);
    load_chunk<V>(weight + c * V, w);
    alignas(16) E out[V];
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = narrow<E>(w[i] * (v[i] * r));
    store_chunk<V>(yr + c * V, out);
  }
}

template <typename E, int V>
__global__ void rms_norm_dx_kernel(const E* x, int64_t ldx, const E* weight, const float* rstd,
                                   const E* dy, int64_t lddy, int64_t tokens, int64_t d,
                                   const E* dresidual, int64_t lddr, E* dx, int64_t lddx) {
  const int64_t t = warp_row();
  if (t >= tokens) return;
  const E *xr = x + t * ldx, *dyr = dy + t * lddy;
  const float r = rstd[t];
  const int64_t chunks = d / V;
  double sum_gx = 0.0;
  for (int64_t c = threadIdx.x; c < chunks; c += kWarp) {
    float xv[V], wv[V], dyv[V];
    load_chunk<V>(xr + c * V, xv);
    load_chunk<V>(weight + c * V, wv);
    load_chunk<V>(dyr + c * V, dyv);
#pragma unroll
    for (int i = 0; i < V; ++i) sum_gx += static_cast<double>(dyv[i] * wv[i]) * (xv[i] * r);
  }
  const float mean_gx = static_cast<float>(warp_sum(sum_gx) / static_cast<double>(d));
  E* dxr = dx + t * lddx;
  const E* dresr = dresidual != nullptr ? dresidual + t * lddr : nullptr;
  for (int64_t c = threadIdx.x; c < chunks; c += kWarp) {
    float xv[V], wv[V], dyv[V], out[V];
    load_chunk<V>(xr + c * V, xv);
    load_chunk<V>(weight + c * V, wv);
    load_chunk<V>(dyr + c * V, dyv);
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = r * (dyv[i] * wv[i] - (xv[i] * r) * mean_gx);
    store_input_grad<V>(out, dresr, c * V, dxr);
  }
}

// An optional operand for the launch's device and dtype checks: x stands in
// for one that is absent.
inline const Tensor* or_x(const Tensor* t, const Tensor& x) {
  return t != nullptr ? t : &x;
}

// Stage 1 of the parameter gradients' column sums (kernels/cuda/column_sums.cuh),
// V features per thread (kPerVector<E> where the rows of x and dy allow it).
// Writes, per (chunk, feature j), in double:
//   partial_gamma = sum dy xhat   (xhat = (x - mean) rstd; mean = null for RMSNorm)
//   partial_beta  = sum dy        (when partial_beta is not null)
template <typename E, int V>
__global__ void norm_param_grad_partials(const E* x, int64_t ldx, const float* mean,
                                         const float* rstd, const E* dy, int64_t lddy,
                                         int64_t tokens, int64_t d, int64_t chunk_rows,
                                         double* partial_gamma, double* partial_beta) {
  constexpr int kFeatures = column_sums::kColumns * V;
  COLROW_BLOCK_SHARED(double, sums_gamma, [column_sums::kRowThreads][kFeatures]);
  COLROW_BLOCK_SHARED(double, sums_beta, [column_sums::kRowThreads][kFeatures]);
  const int64_t j = column_sums::first_feature_of_thread<V>();
  const column_sums::Chunk chunk = column_sums::chunk_of_block(tokens, chunk_rows);
  double sum_gamma[V] = {}, sum_beta[V] = {};
  if (j < d) {
    for (int64_t t = chunk.begin + threadIdx.y; t < chunk.end; t += column_sums::kRowThreads) {
      float g[V], xv[V];
      load_chunk<V>(dy + t * lddy + j, g);
      load_chunk<V>(x + t * ldx + j, xv);
      const float m = mean != nullptr ? mean[t] : 0.0f;
      const float r = rstd[t];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float xhat = (xv[i] - m) * r;
        sum_gamma[i] += static_cast<double>(g[i]) * xhat;
        sum_beta[i] += g[i];
      }
    }
  }
  const double total_gamma = column_sums::sum_row_threads<double, V>(sums_gamma, sum_gamma);
  const double total_beta = column_sums::sum_row_threads<double, V>(sums_beta, sum_beta);
  const int64_t finished = column_sums::finished_feature<V>(d);
  if (finished >= 0) {
    const int64_t at = static_cast<int64_t>(blockIdx.y) * d + finished;
    partial_gamma[at] = total_gamma;
    if (partial_beta != nullptr) partial_beta[at] = total_beta;
  }
}

}  // namespace colrow::kernels::cuda::norm_kernels
