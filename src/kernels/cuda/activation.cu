// Launches of the activation kernels on the GPU (activation.h); the kernels
// are in activation_kernels.cuh.
#include "kernels/cuda/activation.h"

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/elementwise.h"
#include "kernels/cuda/activation_kernels.cuh"
#include "kernels/cuda/operands.h"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {
namespace {

using activation_kernels::kThreads;
using activation_kernels::row_grid;
using activation_kernels::row_strides;
using activation_kernels::RowStrides;

}  // namespace

void gelu_forward(GeluForm form, const Tensor& x, Tensor& y) {
  check_elementwise("activation", "gelu_forward", x, {&y});
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(cuda_device_of("gelu_forward", {&x, &y}));
  with_element_type("gelu_forward", {&x, &y}, [&](auto e) {
    using E = decltype(e);
    activation_kernels::gelu_forward_kernel<E>
        <<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(form, elements<E>(x),
                                                                         elements<E>(y), n);
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

void gelu_backward(GeluForm form, const Tensor& x, const Tensor& dy, Tensor& dx) {
  check_elementwise("activation", "gelu_backward", x, {&dy, &dx});
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t stream =
      colrow::cuda::compute_stream(cuda_device_of("gelu_backward", {&x, &dy, &dx}));
  with_element_type("gelu_backward", {&x, &dy, &dx}, [&](auto e) {
    using E = decltype(e);
    activation_kernels::gelu_backward_kernel<E>
        <<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(
            form, elements<E>(x), elements<E>(dy), elements<E>(dx), n);
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

void silu_forward(const Tensor& x, Tensor& y) {
  check_elementwise("activation", "silu_forward", x, {&y});
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(cuda_device_of("silu_forward", {&x, &y}));
  with_element_type("silu_forward", {&x, &y}, [&](auto e) {
    using E = decltype(e);
    activation_kernels::silu_forward_kernel<E>
        <<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(elements<E>(x),
                                                                         elements<E>(y), n);
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  check_elementwise("activation", "silu_backward", x, {&dy, &dx});
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t stream =
      colrow::cuda::compute_stream(cuda_device_of("silu_backward", {&x, &dy, &dx}));
  with_element_type("silu_backward", {&x, &dy, &dx}, [&](auto e) {
    using E = decltype(e);
    activation_kernels::silu_backward_kernel<E>
        <<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(
            elements<E>(x), elements<E>(dy), elements<E>(dx), n);
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& h) {
  check_elementwise_rows("activation", "swiglu_forward", gate, {&up, &h});
  const int64_t n = gate.numel();
  if (n == 0) return;
  cudaStream_t stream =
      colrow::cuda::compute_stream(cuda_device_of("swiglu_forward", {&gate, &up, &h}));
  with_element_type("swiglu_forward", {&gate, &up, &h}, [&](auto e) {
    using E = decltype(e);
    const RowStrides s = row_strides(gate, up, h);
    activation_kernels::swiglu_forward_kernel<E><<<row_grid(s), kThreads, 0, stream>>>(
        elements<E>(gate), elements<E>(up), elements<E>(h), s);
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, Tensor& dgate,
                     Tensor& dup) {
  check_elementwise_rows("activation", "swiglu_backward", gate, {&up, &dh, &dgate, &dup});
  const int64_t n = gate.numel();
  if (n == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(
      cuda_device_of("swiglu_backward", {&gate, &up, &dh, &dgate, &dup}));
  with_element_type("swiglu_backward", {&gate, &up, &dh, &dgate, &dup}, [&](auto e) {
    using E = decltype(e);
    const RowStrides s = row_strides(gate, up, dh, &dgate, &dup);
    activation_kernels::swiglu_backward_kernel<E>
        <<<row_grid(s), kThreads, 0, stream>>>(elements<E>(gate), elements<E>(up), elements<E>(dh),
                                               elements<E>(dgate), elements<E>(dup), s);
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
