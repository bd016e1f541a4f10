// Activation kernels on the GPU: one thread per element, the formulas and the
// operation order of kernels/cpu/activation.cpp. tanhf and expf are CUDA's
// accurate versions (<= 2 ulp); this file must not be built with
// --use_fast_math, whose __expf loses accuracy for large |x|.
#include "kernels/cuda/activation.h"

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/elementwise.h"
#include "kernels/cuda/operands.h"

namespace colrow::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;
constexpr float kSqrtHalf = 0.7071067811865476f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.3989422804014327f;  // 1 / sqrt(2 pi)

// Stable sigmoid, as on the CPU: e = exp(-|x|) lies in (0, 1], so nothing
// overflows and 1 + e stays in [1, 2]; x < -88.7 gives e = 0 and s = 0, not NaN.
__device__ __forceinline__ float sigmoid(float x) {
  const float e = expf(-fabsf(x));
  return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

__device__ __forceinline__ int64_t element_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__global__ void gelu_forward_kernel(GeluForm form, const float* x, float* y, int64_t n) {
  const int64_t i = element_index();
  if (i >= n) return;
  const float v = x[i];
  if (form == GeluForm::kErf) {
    y[i] = 0.5f * v * (1.0f + erff(v * kSqrtHalf));
    return;
  }
  const float t = tanhf(kGeluK * (v + kGeluC * v * v * v));
  y[i] = 0.5f * v * (1.0f + t);
}

__global__ void gelu_backward_kernel(GeluForm form, const float* x, const float* dy, float* dx,
                                     int64_t n) {
  const int64_t i = element_index();
  if (i >= n) return;
  const float v = x[i];
  if (form == GeluForm::kErf) {
    dx[i] = dy[i] * (0.5f * (1.0f + erff(v * kSqrtHalf)) + v * kInvSqrt2Pi * expf(-0.5f * v * v));
    return;
  }
  const float t = tanhf(kGeluK * (v + kGeluC * v * v * v));
  const float local =
      0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluC * v * v);
  dx[i] = dy[i] * local;
}

__global__ void silu_forward_kernel(const float* x, float* y, int64_t n) {
  const int64_t i = element_index();
  if (i >= n) return;
  y[i] = x[i] * sigmoid(x[i]);
}

__global__ void silu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n) {
  const int64_t i = element_index();
  if (i >= n) return;
  const float v = x[i];
  const float s = sigmoid(v);
  dx[i] = dy[i] * s * (1.0f + v * (1.0f - s));
}

__global__ void swiglu_forward_kernel(const float* gate, const float* up, float* h, int64_t n) {
  const int64_t i = element_index();
  if (i >= n) return;
  const float a = gate[i];
  h[i] = a * sigmoid(a) * up[i];
}

__global__ void swiglu_backward_kernel(const float* gate, const float* up, const float* dh,
                                       float* dgate, float* dup, int64_t n) {
  const int64_t i = element_index();
  if (i >= n) return;
  const float a = gate[i], g = dh[i];
  const float s = sigmoid(a);
  const float silu = a * s;
  dgate[i] = g * up[i] * s * (1.0f + a * (1.0f - s));
  dup[i] = g * silu;
}

}  // namespace

void gelu_forward(GeluForm form, const Tensor& x, Tensor& y) {
  check_elementwise("activation", "gelu_forward", x, {&y});
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(cuda_device_of("gelu_forward", {&x, &y}));
  gelu_forward_kernel<<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(
      form, x.data(), y.data(), n);
  COLROW_CUDA_CHECK_LAUNCH();
}

void gelu_backward(GeluForm form, const Tensor& x, const Tensor& dy, Tensor& dx) {
  check_elementwise("activation", "gelu_backward", x, {&dy, &dx});
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t stream =
      colrow::cuda::compute_stream(cuda_device_of("gelu_backward", {&x, &dy, &dx}));
  gelu_backward_kernel<<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(
      form, x.data(), dy.data(), dx.data(), n);
  COLROW_CUDA_CHECK_LAUNCH();
}

void silu_forward(const Tensor& x, Tensor& y) {
  check_elementwise("activation", "silu_forward", x, {&y});
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(cuda_device_of("silu_forward", {&x, &y}));
  silu_forward_kernel<<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(x.data(),
                                                                                      y.data(), n);
  COLROW_CUDA_CHECK_LAUNCH();
}

void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  check_elementwise("activation", "silu_backward", x, {&dy, &dx});
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t stream =
      colrow::cuda::compute_stream(cuda_device_of("silu_backward", {&x, &dy, &dx}));
  silu_backward_kernel<<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(
      x.data(), dy.data(), dx.data(), n);
  COLROW_CUDA_CHECK_LAUNCH();
}

void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& h) {
  check_elementwise("activation", "swiglu_forward", gate, {&up, &h});
  const int64_t n = gate.numel();
  if (n == 0) return;
  cudaStream_t stream =
      colrow::cuda::compute_stream(cuda_device_of("swiglu_forward", {&gate, &up, &h}));
  swiglu_forward_kernel<<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(
      gate.data(), up.data(), h.data(), n);
  COLROW_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, Tensor& dgate,
                     Tensor& dup) {
  check_elementwise("activation", "swiglu_backward", gate, {&up, &dh, &dgate, &dup});
  const int64_t n = gate.numel();
  if (n == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(
      cuda_device_of("swiglu_backward", {&gate, &up, &dh, &dgate, &dup}));
  swiglu_backward_kernel<<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0, stream>>>(
      gate.data(), up.data(), dh.data(), dgate.data(), dup.data(), n);
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
