// Bias add and bias-gradient column sums on the GPU. The gradient is the
// two-stage column sum of kernels/cuda/column_sums.cuh: no atomics, an order
// that depends on the shape only. Sums are fp32, as in kernels/cpu/bias.cpp.
// y, b and dy are fp32 or bf16 (E, kernels/elements.h), bf16 read natively
// and y rounded once; db stays fp32.
#include "kernels/cuda/bias.h"

#include <algorithm>
#include <cstdint>

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/bias.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/kept_buffers.h"
#include "kernels/cuda/operands.h"
#include "kernels/cuda/vectors.cuh"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {
namespace {

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

// Stage 1 of the column sum (kernels/cuda/column_sums.cuh): the fp32 sum of
// dy over the block's chunk of tokens, per feature.
template <typename E>
__global__ void bias_grad_partials(const E* dy, int64_t tokens, int64_t features, int64_t ld,
                                   int64_t chunk_rows, float* partial) {
  __shared__ float sums[column_sums::kRowThreads][column_sums::kColumns];
  const int64_t j = column_sums::feature_of_thread();
  const column_sums::Chunk chunk = column_sums::chunk_of_block(tokens, chunk_rows);
  float sum = 0.0f;
  if (j < features) {
    for (int64_t t = chunk.begin + threadIdx.y; t < chunk.end; t += column_sums::kRowThreads) {
      sum += widen(dy[t * ld + j]);
    }
  }
  const float total = column_sums::sum_row_threads(sums, sum);
  if (threadIdx.y == 0 && j < features) {
    partial[static_cast<int64_t>(blockIdx.y) * features + j] = total;
  }
}

}  // namespace

void add_bias(Tensor& y, const Tensor& b) {
  check_bias(y, b, "add_bias");
  const int64_t tokens = y.size(0), features = y.size(1);
  if (tokens * features == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(cuda_device_of("add_bias", {&y, &b}));
  with_element_type("add_bias", {&y, &b}, [&](auto e) {
    using E = decltype(e);
    if (rows_in_vectors({&y, &b})) {
      constexpr int64_t kMaxGridRows = 65535;
      const unsigned blocks = colrow::cuda::blocks_for(features / kPerVector<E>, kThreads);
      for (int64_t t0 = 0; t0 < tokens; t0 += kMaxGridRows) {
        const int64_t rows = std::min(kMaxGridRows, tokens - t0);
        add_bias_vectors<E><<<dim3(blocks, static_cast<unsigned>(rows)), kThreads, 0, stream>>>(
            elements<E>(y) + t0 * y.row_stride(), elements<E>(b), rows, features, y.row_stride());
      }
      return;
    }
    add_bias_kernel<E>
        <<<colrow::cuda::blocks_for(tokens * features, kThreads), kThreads, 0, stream>>>(
            elements<E>(y), elements<E>(b), tokens, features, y.row_stride());
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

void accumulate_bias_grad(const Tensor& dy, Tensor& db) {
  check_bias(dy, db, "accumulate_bias_grad");
  const int64_t tokens = dy.size(0), features = dy.size(1);
  if (tokens * features == 0) return;  // db += 0
  const int device = cuda_device_of("accumulate_bias_grad", {&dy, &db});
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  const column_sums::Layout layout = column_sums::layout(tokens, features);
  Tensor partial = kept_scratch(device, "bias_grad.partials", {layout.chunks, features});
  with_elements(dy, [&](const auto* g) {
    bias_grad_partials<<<layout.grid, layout.block, 0, stream>>>(
        g, tokens, features, dy.row_stride(), layout.chunk_rows, partial.data());
  });
  COLROW_CUDA_CHECK_LAUNCH();
  column_sums::add_partials(stream, partial.data(), layout.chunks, features, db.data());
}

}  // namespace colrow::kernels::cuda
