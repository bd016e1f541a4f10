// Residual adds on the GPU, one thread per element (memory-bound: one pass
// each), on fp32 or bf16 activations (E, kernels/elements.h): bf16 read
// natively, each sum rounded once.
#include "kernels/cuda/residual.h"

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/elementwise.h"
#include "kernels/cuda/operands.h"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <typename E>
__global__ void add_kernel(const E* a, const E* b, E* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = narrow<E>(widen(a[i]) + widen(b[i]));
}

template <typename E>
__global__ void add_into_kernel(E* out, const E* a, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = narrow<E>(widen(out[i]) + widen(a[i]));
}

}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  check_elementwise("residual", "add", a, {&b, &out});
  const int64_t n = a.numel();
  if (n == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(cuda_device_of("add", {&a, &b, &out}));
  with_element_type("add", {&a, &b, &out}, [&](auto e) {
    using E = decltype(e);
    add_kernel<E><<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(
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
    add_into_kernel<E><<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(
        elements<E>(out), elements<E>(a), n);
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
