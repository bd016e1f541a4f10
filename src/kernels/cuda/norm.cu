// Launches of LayerNorm and RMSNorm on the GPU (norm.h); the kernels, and
// how they sum, are in norm_kernels.cuh, the parameter gradients' second
// stage in column_sums.cuh.
#include "kernels/cuda/norm.h"

#include <cstdint>

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/norm.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/kept_buffers.h"
#include "kernels/cuda/norm_kernels.cuh"
#include "kernels/cuda/operands.h"
#include "kernels/cuda/vectors.cuh"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {
namespace {

using norm_kernels::kRowBlock;
using norm_kernels::or_x;
using norm_kernels::residual_rows;
using norm_kernels::row_blocks;

// dgamma += sum_t dy xhat and (when dbeta) dbeta += sum_t dy, deterministically,
// 16 bytes of x and dy at a time where their rows allow it. x and dy hold E.
template <typename E>
void accumulate_param_grads(int device, const Tensor& x, const float* mean, const Tensor& rstd,
                            const Tensor& dy, Tensor& dgamma, Tensor* dbeta) {
  const int64_t tokens = x.size(0), d = x.size(1);
  if (tokens == 0 || d == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  with_chunk<E>(rows_in_vectors({&x, &dy}), [&](auto v) {
    constexpr int V = decltype(v)::value;
    const column_sums::Layout layout = column_sums::layout<V>(tokens, d);
    const int64_t count = layout.chunks * d;  // doubles per gradient
    // Double partials live in an fp32 tensor of twice the count, at the start
    // of a 256-byte aligned buffer, so the cast is aligned.
    Tensor scratch =
        kept_scratch(device, "norm_grad.partials", {(dbeta != nullptr ? 4 : 2) * count});
    double* partial_gamma = reinterpret_cast<double*>(scratch.data());
    double* partial_beta = dbeta != nullptr ? partial_gamma + count : nullptr;
    norm_kernels::norm_param_grad_partials<E, V><<<layout.grid, layout.block, 0, stream>>>(
        elements<E>(x), x.row_stride(), mean, rstd.data(), elements<E>(dy), dy.row_stride(), tokens,
        d, layout.chunk_rows, partial_gamma, partial_beta);
    COLROW_CUDA_CHECK_LAUNCH();
    column_sums::add_partials(stream, partial_gamma, layout.chunks, d, dgamma.data());
    if (dbeta != nullptr) {
      column_sums::add_partials(stream, partial_beta, layout.chunks, d, dbeta->data());
    }
  });
}

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd, const Tensor* residual,
                        Tensor* sum) {
  check_layer_norm_forward(x, gamma, beta, y, mean, rstd);
  check_norm_residual(x, residual, sum, "layer_norm_forward");
  const int64_t tokens = x.size(0), d = x.size(1);
  if (tokens == 0) return;
  const int device = cuda_device_of(
      "layer_norm_forward", {&x, &gamma, &beta, &y, &mean, &rstd, or_x(residual, x), or_x(sum, x)});
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  with_element_type(
      "layer_norm_forward", {&x, &gamma, &beta, &y, or_x(residual, x), or_x(sum, x)}, [&](auto e) {
        using E = decltype(e);
        with_chunk<E>(rows_in_vectors({&x, &gamma, &beta, &y, residual, sum}), [&](auto v) {
          norm_kernels::layer_norm_forward_kernel<E, decltype(v)::value>
              <<<row_blocks(tokens), kRowBlock, 0, stream>>>(
                  elements<E>(x), x.row_stride(), residual_rows<E>(residual, sum),
                  elements<E>(gamma), elements<E>(beta), eps, tokens, d, elements<E>(y),
                  y.row_stride(), mean.data(), rstd.data());
        });
      });
  COLROW_CUDA_CHECK_LAUNCH();
}

void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                         Tensor& dbeta, const Tensor* dresidual) {
  check_layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  check_norm_dresidual(dx, dresidual, "layer_norm_backward");
  const int64_t tokens = x.size(0), d = x.size(1);
  if (tokens == 0) return;
  const int device = cuda_device_of("layer_norm_backward", {&x, &gamma, &mean, &rstd, &dy, &dx,
                                                            &dgamma, &dbeta, or_x(dresidual, x)});
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  with_element_type("layer_norm_backward", {&x, &gamma, &dy, &dx, or_x(dresidual, x)}, [&](auto e) {
    using E = decltype(e);
    with_chunk<E>(rows_in_vectors({&x, &gamma, &dy, &dx, dresidual}), [&](auto v) {
      norm_kernels::layer_norm_dx_kernel<E, decltype(v)::value>
          <<<row_blocks(tokens), kRowBlock, 0, stream>>>(
              elements<E>(x), x.row_stride(), elements<E>(gamma), mean.data(), rstd.data(),
              elements<E>(dy), dy.row_stride(), tokens, d,
              dresidual != nullptr ? elements<E>(*dresidual) : nullptr,
              dresidual != nullptr ? dresidual->row_stride() : 0, elements<E>(dx), dx.row_stride());
    });
    COLROW_CUDA_CHECK_LAUNCH();
    accumulate_param_grads<E>(device, x, mean.data(), rstd, dy, dgamma, &dbeta);
  });
}

void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd,
                      const Tensor* residual, Tensor* sum) {
  check_rms_norm_forward(x, weight, y, rstd);
  check_norm_residual(x, residual, sum, "rms_norm_forward");
  const int64_t tokens = x.size(0), d = x.size(1);
  if (tokens == 0) return;
  const int device =
      cuda_device_of("rms_norm_forward", {&x, &weight, &y, &rstd, or_x(residual, x), or_x(sum, x)});
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  with_element_type(
      "rms_norm_forward", {&x, &weight, &y, or_x(residual, x), or_x(sum, x)}, [&](auto e) {
        using E = decltype(e);
        with_chunk<E>(rows_in_vectors({&x, &weight, &y, residual, sum}), [&](auto v) {
          norm_kernels::rms_norm_forward_kernel<E, decltype(v)::value>
              <<<row_blocks(tokens), kRowBlock, 0, stream>>>(
                  elements<E>(x), x.row_stride(), residual_rows<E>(residual, sum),
                  elements<E>(weight), eps, tokens, d, elements<E>(y), y.row_stride(), rstd.data());
        });
      });
  COLROW_CUDA_CHECK_LAUNCH();
}

void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                       Tensor& dx, Tensor& dweight, const Tensor* dresidual) {
  check_rms_norm_backward(x, weight, rstd, dy, dx, dweight);
  check_norm_dresidual(dx, dresidual, "rms_norm_backward");
  const int64_t tokens = x.size(0), d = x.size(1);
  if (tokens == 0) return;
  const int device = cuda_device_of("rms_norm_backward",
                                    {&x, &weight, &rstd, &dy, &dx, &dweight, or_x(dresidual, x)});
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  with_element_type("rms_norm_backward", {&x, &weight, &dy, &dx, or_x(dresidual, x)}, [&](auto e) {
    using E = decltype(e);
    with_chunk<E>(rows_in_vectors({&x, &weight, &dy, &dx, dresidual}), [&](auto v) {
      norm_kernels::rms_norm_dx_kernel<E, decltype(v)::value>
          <<<row_blocks(tokens), kRowBlock, 0, stream>>>(
              elements<E>(x), x.row_stride(), elements<E>(weight), rstd.data(), elements<E>(dy),
              dy.row_stride(), tokens, d, dresidual != nullptr ? elements<E>(*dresidual) : nullptr,
              dresidual != nullptr ? dresidual->row_stride() : 0, elements<E>(dx), dx.row_stride());
    });
    COLROW_CUDA_CHECK_LAUNCH();
    accumulate_param_grads<E>(device, x, nullptr, rstd, dy, dweight, nullptr);
  });
}

}  // namespace colrow::kernels::cuda
