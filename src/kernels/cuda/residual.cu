// Residual adds on the GPU, one thread per element (memory-bound: one pass each).
#include "kernels/cuda/residual.h"

#include <string>

#include "colrow/core/error.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"

namespace colrow::kernels::cuda {
namespace {

constexpr int kThreads = 256;

void require_same(const Tensor& a, const Tensor& b, const char* what) {
  if (!a.is_contiguous() || !b.is_contiguous() || a.shape() != b.shape()) {
    throw InternalError(std::string("[residual] ") + what +
                        ": operands must be contiguous and of one shape, got " +
                        shape_to_string(a.shape()) + " and " + shape_to_string(b.shape()));
  }
}

// The compute stream of the GPU every operand lives on; InternalError for a
// host tensor or two GPUs.
cudaStream_t stream_of(const char* what, std::initializer_list<const Tensor*> tensors) {
  const Device device = (*tensors.begin())->device();
  if (!device.is_cuda()) {
    throw InternalError(std::string("[residual] ") + what +
                        ": operands must be CUDA tensors, got one on " + device.str());
  }
  require_device(what, device, tensors);
  return colrow::cuda::compute_stream(device.index);
}

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
  require_same(a, b, "add");
  require_same(a, out, "add");
  const int64_t n = a.numel();
  if (n == 0) return;
  cudaStream_t stream = stream_of("add", {&a, &b, &out});
  add_kernel<<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(a.data(), b.data(),
                                                                             out.data(), n);
  COLROW_CUDA_CHECK_LAUNCH();
}

void add_into(Tensor& out, const Tensor& a) {
  require_same(out, a, "add_into");
  const int64_t n = a.numel();
  if (n == 0) return;
  cudaStream_t stream = stream_of("add_into", {&out, &a});
  add_into_kernel<<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(out.data(),
                                                                                  a.data(), n);
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
