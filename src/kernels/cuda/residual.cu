// Residual adds on the GPU, one thread per element (memory-bound: one pass each).
#include "kernels/cuda/residual.h"

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/elementwise.h"
#include "kernels/cuda/operands.h"

namespace colrow::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void add_into_kernel(float* out, const float* a, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] += a[i];
}

}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  check_elementwise("residual", "add", a, {&b, &out});
  const int64_t n = a.numel();
  if (n == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(cuda_device_of("add", {&a, &b, &out}));
  add_kernel<<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(a.data(), b.data(),
                                                                             out.data(), n);
  COLROW_CUDA_CHECK_LAUNCH();
}

void add_into(Tensor& out, const Tensor& a) {
  check_elementwise("residual", "add_into", out, {&a});
  const int64_t n = a.numel();
  if (n == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(cuda_device_of("add_into", {&out, &a}));
  add_into_kernel<<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(out.data(),
                                                                                  a.data(), n);
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
