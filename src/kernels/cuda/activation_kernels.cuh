// The activation kernels on the GPU (activation.h; launched by
// activation.cu): one thread per element, the formulas and the operation
// order of kernels/cpu/activation.cpp. They take fp32 or bf16 activations
// (E, kernels/elements.h), reading bf16 natively; each output is its fp32
// value rounded once. tanhf and expf are CUDA's accurate versions (<= 2 ulp);
// this code must not be built with --use_fast_math, whose __expf loses
// accuracy for large |x|. A host compiler takes this header too:
// tests/kernels/cuda/activation_test runs these kernels on the CPU through
// the warp emulation as well as on a GPU.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "colrow/core/bfloat16.h"
#include "colrow/core/tensor.h"
#include "core/cuda/cuda_context.h"
#include "kernels/gelu_form.h"

namespace colrow::kernels::cuda::activation_kernels {

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

template <typename E>
__global__ void gelu_forward_kernel(GeluForm form, const E* x, E* y, int64_t n) {
  const int64_t i = element_index();
  if (i >= n) return;
  const float v = widen(x[i]);
  if (form == GeluForm::kErf) {
    y[i] = narrow<E>(0.5f * v * (1.0f + erff(v * kSqrtHalf)));
    return;
  }
  const float t = tanhf(kGeluK * (v + kGeluC * v * v * v));
  y[i] = narrow<E>(0.5f * v * (1.0f + t));
}

template <typename E>
__global__ void gelu_backward_kernel(GeluForm form, const E* x, const E* dy, E* dx, int64_t n) {
  const int64_t i = element_index();
  if (i >= n) return;
  const float v = widen(x[i]);
  if (form == GeluForm::kErf) {
    dx[i] = narrow<E>(widen(dy[i]) * (0.5f * (1.0f + erff(v * kSqrtHalf)) +
                                      v * kInvSqrt2Pi * expf(-0.5f * v * v)));
    return;
  }
  const float t = tanhf(kGeluK * (v + kGeluC * v * v * v));
  const float local =
      0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluC * v * v);
  dx[i] = narrow<E>(widen(dy[i]) * local);
}

template <typename E>
__global__ void silu_forward_kernel(const E* x, E* y, int64_t n) {
  const int64_t i = element_index();
  if (i >= n) return;
  const float v = widen(x[i]);
  y[i] = narrow<E>(v * sigmoid(v));
}

template <typename E>
__global__ void silu_backward_kernel(const E* x, const E* dy, E* dx, int64_t n) {
  const int64_t i = element_index();
  if (i >= n) return;
  const float v = widen(x[i]);
  const float s = sigmoid(v);
  dx[i] = narrow<E>(widen(dy[i]) * s * (1.0f + v * (1.0f - s)));
}

// SwiGLU's operands are [rows, cols], each read through its own row stride:
// gate and up may be column blocks of one fused projection's output (and
// dgate, dup of its gradient). Contiguous operands are one row of n. Threads
// take columns (x) and blocks step over rows (y): no division per element.
struct RowStrides {
  int64_t rows, cols, gate, up, h_or_dh, dgate, dup;
};

template <typename E>
__global__ void swiglu_forward_kernel(const E* gate, const E* up, E* h, RowStrides s) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= s.cols) return;
  for (int64_t r = blockIdx.y; r < s.rows; r += gridDim.y) {
    const float a = widen(gate[r * s.gate + j]);
    h[r * s.h_or_dh + j] = narrow<E>(a * sigmoid(a) * widen(up[r * s.up + j]));
  }
}

template <typename E>
__global__ void swiglu_backward_kernel(const E* gate, const E* up, const E* dh, E* dgate, E* dup,
                                       RowStrides s) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= s.cols) return;
  for (int64_t r = blockIdx.y; r < s.rows; r += gridDim.y) {
    const float a = widen(gate[r * s.gate + j]), g = widen(dh[r * s.h_or_dh + j]);
    const float sg = sigmoid(a);
    const float silu = a * sg;
    dgate[r * s.dgate + j] = narrow<E>(g * widen(up[r * s.up + j]) * sg * (1.0f + a * (1.0f - sg)));
    dup[r * s.dup + j] = narrow<E>(g * silu);
  }
}

// The rows, columns and each operand's row stride: contiguous operands as one row.
inline RowStrides row_strides(const Tensor& gate, const Tensor& up, const Tensor& h_or_dh,
                              const Tensor* dgate = nullptr, const Tensor* dup = nullptr) {
  const bool contiguous = gate.is_contiguous() && up.is_contiguous() && h_or_dh.is_contiguous() &&
                          (dgate == nullptr || (dgate->is_contiguous() && dup->is_contiguous()));
  if (contiguous) {
    const int64_t n = gate.numel();
    return {1, n, n, n, n, n, n};
  }
  return {gate.size(0),
          gate.size(1),
          gate.row_stride(),
          up.row_stride(),
          h_or_dh.row_stride(),
          dgate ? dgate->row_stride() : 0,
          dup ? dup->row_stride() : 0};
}

// Columns over x; rows over y, at most the grid's 65535 (blocks then loop).
inline dim3 row_grid(const RowStrides& s) {
  return dim3(colrow::cuda::blocks_for(s.cols, kThreads),
              static_cast<unsigned int>(std::min<int64_t>(s.rows, 65535)));
}

}  // namespace colrow::kernels::cuda::activation_kernels
