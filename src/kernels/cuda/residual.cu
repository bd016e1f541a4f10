// Launches of the residual adds on the GPU (residual.h); the kernels are in
// residual_kernels.cuh.
#include "kernels/cuda/residual.h"

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/elementwise.h"
#include "kernels/cuda/operands.h"
#include "kernels/cuda/residual_kernels.cuh"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {
namespace {

using residual_kernels::kThreads;

}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  check_elementwise("residual", "add", a, {&b, &out});
  const int64_t n = a.numel();
  if (n == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(cuda_device_of("add", {&a, &b, &out}));
  with_element_type("add", {&a, &b, &out}, [&](auto e) {
    using E = decltype(e);
    residual_kernels::add_kernel<E><<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(
        elements<E>(a), elements<E>(b), elements<E>(out), n);
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

void add_into(Tensor& out, const Tensor& a) {
  check_elementwise("residual", "add_into", out, {&a});
  const int64_t n = a.numel();
  if (n == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(cuda_device_of("add_into", {&out, &a}));
  with_element_type("add_into", {&out, &a}, [&](auto e) {
    using E = decltype(e);
    residual_kernels::add_into_kernel<E>
        <<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(elements<E>(out),
                                                                         elements<E>(a), n);
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
