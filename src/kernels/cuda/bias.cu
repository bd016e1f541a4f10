// Launches of the bias add and the bias gradient on the GPU (bias.h); the
// kernels are in bias_kernels.cuh, the gradient's second stage in
// column_sums.cuh.
#include "kernels/cuda/bias.h"

#include <cstdint>

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/bias.h"
#include "kernels/cuda/bias_kernels.cuh"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/kept_buffers.h"
#include "kernels/cuda/operands.h"
#include "kernels/cuda/vectors.cuh"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {
namespace {

using bias_kernels::kThreads;

}  // namespace

void add_bias(Tensor& y, const Tensor& b) {
  check_bias(y, b, "add_bias");
  const int64_t tokens = y.size(0), features = y.size(1);
  if (tokens * features == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(cuda_device_of("add_bias", {&y, &b}));
  with_element_type("add_bias", {&y, &b}, [&](auto e) {
    using E = decltype(e);
    if (rows_in_vectors({&y, &b})) {
      const unsigned blocks = colrow::cuda::blocks_for(features / kPerVector<E>, kThreads);
      bias_kernels::for_each_grid_of_rows(tokens, [&](int64_t t0, int64_t rows) {
        bias_kernels::add_bias_vectors<E>
            <<<dim3(blocks, static_cast<unsigned>(rows)), kThreads, 0, stream>>>(
                elements<E>(y) + t0 * y.row_stride(), elements<E>(b), rows, features,
                y.row_stride());
      });
      return;
    }
    bias_kernels::add_bias_kernel<E>
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
  with_element_type("accumulate_bias_grad", {&dy}, [&](auto e) {
    using E = decltype(e);
    with_chunk<E>(rows_in_vectors({&dy}), [&](auto v) {
      constexpr int V = decltype(v)::value;
      const column_sums::Layout layout = column_sums::layout<V>(tokens, features);
      Tensor partial = kept_scratch(device, "bias_grad.partials", {layout.chunks, features});
      bias_kernels::bias_grad_partials<E, V><<<layout.grid, layout.block, 0, stream>>>(
          elements<E>(dy), tokens, features, dy.row_stride(), layout.chunk_rows, partial.data());
      COLROW_CUDA_CHECK_LAUNCH();
      column_sums::add_partials(stream, partial.data(), layout.chunks, features, db.data());
    });
  });
}

}  // namespace colrow::kernels::cuda
