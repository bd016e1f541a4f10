// Activation kernels. This file is compiled with -ffast-math (see
// src/CMakeLists.txt) so that glibc's vector tanhf/expf (libmvec) are used in
// the simd loops: a scalar tanhf would cost more than the GEMMs around it.
// The vector versions are accurate to a few ulp, well inside the tests' bounds,
// but round differently from the scalar ones a loop's tail calls: every loop
// runs in parallel.h's fixed element blocks, so an element takes the same path
// (and gets the same bits) whatever the thread count. Operands are fp32 or
// bf16 (kernels/cpu/element_blocks.h: the same fp32 code, rounded once).
#include "kernels/cpu/activation.h"

#include <cmath>

#include "kernels/checks/elementwise.h"
#include "kernels/cpu/element_blocks.h"

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
  map_element_blocks<1, 1>("gelu_forward", {&x}, {&y}, [form](auto in, auto out, int64_t n) {
    const float* v = in[0];
    float* r = out[0];
    if (form == GeluForm::kErf) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) r[i] = 0.5f * v[i] * (1.0f + std::erf(v[i] * kSqrtHalf));
      return;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float t = std::tanh(kGeluK * (v[i] + kGeluC * v[i] * v[i] * v[i]));
      r[i] = 0.5f * v[i] * (1.0f + t);
    }
  });
}

void gelu_backward(GeluForm form, const Tensor& x, const Tensor& dy, Tensor& dx) {
  check_elementwise("activation", "gelu_backward", x, {&dy, &dx});
  map_element_blocks<2, 1>("gelu_backward", {&x, &dy}, {&dx}, [form](auto in, auto out, int64_t n) {
    const float *v = in[0], *g = in[1];
    float* r = out[0];
    if (form == GeluForm::kErf) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const float local = 0.5f * (1.0f + std::erf(v[i] * kSqrtHalf)) +
                            v[i] * kInvSqrt2Pi * std::exp(-0.5f * v[i] * v[i]);
        r[i] = g[i] * local;
      }
      return;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float t = std::tanh(kGeluK * (v[i] + kGeluC * v[i] * v[i] * v[i]));
      const float local = 0.5f * (1.0f + t) + 0.5f * v[i] * (1.0f - t * t) * kGeluK *
                                                  (1.0f + 3.0f * kGeluC * v[i] * v[i]);
      r[i] = g[i] * local;
    }
  });
}

void silu_forward(const Tensor& x, Tensor& y) {
  check_elementwise("activation", "silu_forward", x, {&y});
  map_element_blocks<1, 1>("silu_forward", {&x}, {&y}, [](auto in, auto out, int64_t n) {
    const float* v = in[0];
    float* r = out[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) r[i] = v[i] * sigmoid(v[i]);
  });
}

void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  check_elementwise("activation", "silu_backward", x, {&dy, &dx});
  map_element_blocks<2, 1>("silu_backward", {&x, &dy}, {&dx}, [](auto in, auto out, int64_t n) {
    const float *v = in[0], *g = in[1];
    float* r = out[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float s = sigmoid(v[i]);
      r[i] = g[i] * s * (1.0f + v[i] * (1.0f - s));
    }
  });
}

void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& h) {
  check_elementwise_rows("activation", "swiglu_forward", gate, {&up, &h});
  map_element_blocks<2, 1>("swiglu_forward", {&gate, &up}, {&h}, [](auto in, auto out, int64_t n) {
    const float *a = in[0], *b = in[1];
    float* r = out[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) r[i] = a[i] * sigmoid(a[i]) * b[i];
  });
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, Tensor& dgate,
                     Tensor& dup) {
  check_elementwise_rows("activation", "swiglu_backward", gate, {&up, &dh, &dgate, &dup});
  map_element_blocks<3, 2>("swiglu_backward", {&gate, &up, &dh}, {&dgate, &dup},
                           [](auto in, auto out, int64_t n) {
                             const float *a = in[0], *b = in[1], *g = in[2];
                             float *da = out[0], *db = out[1];
#pragma omp simd
                             for (int64_t i = 0; i < n; ++i) {
                               const float ai = a[i], bi = b[i], gi = g[i];  // before any store
                               const float s = sigmoid(ai);
                               const float silu = ai * s;
                               da[i] = gi * bi * s * (1.0f + ai * (1.0f - s));
                               db[i] = gi * silu;
                             }
                           });
}

}  // namespace colrow::kernels::cpu
