// Activation kernels. This file is compiled with -ffast-math (see
// src/CMakeLists.txt) so that glibc's vector tanhf/expf (libmvec) are used in
// the simd loops: a scalar tanhf would cost more than the GEMMs around it.
// The vector versions are accurate to a few ulp, well inside the tests' bounds,
// but round differently from the scalar ones a loop's tail calls: every loop
// runs in parallel.h's fixed element blocks, so an element takes the same path
// (and gets the same bits) whatever the thread count.
#include "kernels/cpu/activation.h"

#include <cmath>

#include "kernels/checks/elementwise.h"
#include "kernels/cpu/parallel.h"

namespace colrow::kernels::cpu {
namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;
constexpr float kSqrtHalf = 0.7071067811865476f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.3989422804014327f;  // 1 / sqrt(2 pi)

// Stable sigmoid: e = exp(-|x|) lies in (0, 1], so nothing overflows and the
// divisor 1 + e stays in [1, 2]. (1 / (1 + exp(-x)) becomes rcp(inf) times a
// Newton step = NaN under -ffast-math once exp(-x) overflows, x < -88; and
// (1 + tanh(x/2)) / 2 cancels for negative x.)
inline float sigmoid(float x) {
  const float e = std::exp(-std::fabs(x));
  return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

}  // namespace

void gelu_forward(GeluForm form, const Tensor& x, Tensor& y) {
  check_elementwise("activation", "gelu_forward", x, {&y});
  const int64_t n = x.numel();
  const float* in = x.data();
  float* out = y.data();
  if (form == GeluForm::kErf) {
    for_each_element_block(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        const float v = in[i];
        out[i] = 0.5f * v * (1.0f + std::erf(v * kSqrtHalf));
      }
    });
    return;
  }
  for_each_element_block(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) {
      const float v = in[i];
      const float t = std::tanh(kGeluK * (v + kGeluC * v * v * v));
      out[i] = 0.5f * v * (1.0f + t);
    }
  });
}

void gelu_backward(GeluForm form, const Tensor& x, const Tensor& dy, Tensor& dx) {
  check_elementwise("activation", "gelu_backward", x, {&dy, &dx});
  const int64_t n = x.numel();
  const float* in = x.data();
  const float* g = dy.data();
  float* out = dx.data();
  if (form == GeluForm::kErf) {
    for_each_element_block(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        const float v = in[i];
        const float local =
            0.5f * (1.0f + std::erf(v * kSqrtHalf)) + v * kInvSqrt2Pi * std::exp(-0.5f * v * v);
        out[i] = g[i] * local;
      }
    });
    return;
  }
  for_each_element_block(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) {
      const float v = in[i];
      const float t = std::tanh(kGeluK * (v + kGeluC * v * v * v));
      const float local =
          0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluC * v * v);
      out[i] = g[i] * local;
    }
  });
}

void silu_forward(const Tensor& x, Tensor& y) {
  check_elementwise("activation", "silu_forward", x, {&y});
  const int64_t n = x.numel();
  const float* in = x.data();
  float* out = y.data();
  for_each_element_block(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) out[i] = in[i] * sigmoid(in[i]);
  });
}

void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  check_elementwise("activation", "silu_backward", x, {&dy, &dx});
  const int64_t n = x.numel();
  const float* in = x.data();
  const float* g = dy.data();
  float* out = dx.data();
  for_each_element_block(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) {
      const float s = sigmoid(in[i]);
      out[i] = g[i] * s * (1.0f + in[i] * (1.0f - s));
    }
  });
}

void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& h) {
  check_elementwise("activation", "swiglu_forward", gate, {&up, &h});
  const int64_t n = gate.numel();
  const float* a = gate.data();
  const float* b = up.data();
  float* out = h.data();
  for_each_element_block(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) out[i] = a[i] * sigmoid(a[i]) * b[i];
  });
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, Tensor& dgate,
                     Tensor& dup) {
  check_elementwise("activation", "swiglu_backward", gate, {&up, &dh, &dgate, &dup});
  const int64_t n = gate.numel();
  const float* a = gate.data();
  const float* b = up.data();
  const float* g = dh.data();
  float* da = dgate.data();
  float* db = dup.data();
  for_each_element_block(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) {
      const float s = sigmoid(a[i]);
      const float silu = a[i] * s;
      da[i] = g[i] * b[i] * s * (1.0f + a[i] * (1.0f - s));
      db[i] = g[i] * silu;
    }
  });
}

}  // namespace colrow::kernels::cpu
