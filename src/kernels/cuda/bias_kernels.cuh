// The bias kernels on the GPU (bias.h; launched by bias.cu): the bias add,
// 16 bytes at a time where the rows allow it, and stage 1 of the bias
// gradient's two-stage column sum (kernels/cuda/column_sums.cuh: no atomics,
// an order that depends on the shape only). Sums are fp32, as in
// kernels/cpu/bias.cpp. y, b and dy are fp32 or bf16 (E,
// kernels/elements.h), bf16 read natively and y rounded once; db stays fp32.
// A host compiler takes this header too: tests/kernels/cuda/bias_test runs
// these kernels on the CPU through the warp emulation as well as on a GPU.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "colrow/core/bfloat16.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/shared_memory.cuh"
#include "kernels/cuda/vectors.cuh"

namespace colrow::kernels::cuda::bias_kernels {

constexpr int kThreads = 256;

template <typename E>
__global__ void add_bias_kernel(E* y, const E* b, int64_t tokens, int64_t features, int64_t ld) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * features) return;
  const int64_t j = i % features;
  E& out = y[(i / features) * ld + j];
  out = narrow<E>(widen(out) + widen(b[j]));
}

// The same sums 16 bytes at a time (kernels/cuda/vectors.cuh), where the
// rows of y and b allow it: one element per thread, and a 64-bit division for
// each, left the bias add at a fifth of an H200's memory bandwidth. Each
// element's sum is the scalar kernel's. y's row t0 + blockIdx.y, ld in E.
template <typename E>
__global__ void add_bias_vectors(E* y, const E* b, int64_t tokens, int64_t features, int64_t ld) {
  constexpr int V = kPerVector<E>;
  const int64_t j = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  const int64_t t = blockIdx.y;  // one grid row per token row (at most 65535 per launch)
  if (j >= features || t >= tokens) return;
  E* row = y + t * ld + j;
  float out[V], bias[V];
  load_chunk<V>(row, out);
  load_chunk<V>(b + j, bias);
  alignas(16) E sum[V];
#pragma unroll
  for (int i = 0; i < V; ++i) sum[i] = narrow<E>(out[i] + bias[i]);
  store_chunk<V>(row, sum);
}

// Stage 1 of the column sum (kernels/cuda/column_sums.cuh), V features per
// thread (kPerVector<E> where dy's rows allow it): the fp32 sum of dy over the
// block's chunk of tokens, per feature.
template <typename E, int V>
__global__ void bias_grad_partials(const E* dy, int64_t tokens, int64_t features, int64_t ld,
                                   int64_t chunk_rows, float* partial) {
  COLROW_BLOCK_SHARED(float, sums, [column_sums::kRowThreads][column_sums::kColumns * V]);
  const int64_t j = column_sums::first_feature_of_thread<V>();
  const column_sums::Chunk chunk = column_sums::chunk_of_block(tokens, chunk_rows);
  float sum[V] = {};
  if (j < features) {
    for (int64_t t = chunk.begin + threadIdx.y; t < chunk.end; t += column_sums::kRowThreads) {
      float g[V];
      load_chunk<V>(dy + t * ld + j, g);
#pragma unroll
      for (int i = 0; i < V; ++i) sum[i] += g[i];
    }
  }
  const float total = column_sums::sum_row_threads<float, V>(sums, sum);
  const int64_t finished = column_sums::finished_feature<V>(features);
  if (finished >= 0) partial[static_cast<int64_t>(blockIdx.y) * features + finished] = total;
}

// The vector add takes one grid row per token row, at most 65535 per launch:
// launch(first_row, rows) for each run of rows, in order.
template <typename Launch>
void for_each_grid_of_rows(int64_t tokens, Launch&& launch) {
  constexpr int64_t kMaxGridRows = 65535;
  for (int64_t t0 = 0; t0 < tokens; t0 += kMaxGridRows) {
    launch(t0, std::min(kMaxGridRows, tokens - t0));
  }
}

}  // namespace colrow::kernels::cuda::bias_kernels
