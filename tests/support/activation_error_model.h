// The error model of the GELU / SiLU kernels, shared by the CPU kernel test
// and the test of their CUDA twins: exact double versions of each function,
// and for each a first-order bound on an fp32 implementation's error,
// derived in the comment above it.
#pragma once

#include <cmath>

namespace colrow::activation_error_model {

// Error model. u = 2^-24 is fp32's unit roundoff. The kernel file is built with
// -ffast-math and calls glibc's tanhf/expf (the vector versions on the simd
// path), documented to a few ulp; we allow 4 ulp, i.e. a relative error of 8u (an ulp is at most 2u
// relative). Every bound below is the first-order propagation of those errors plus one u per fp32
// operation, derived in the comment above its function, and the tests accept twice that (kMargin):
// enough slack for the constants being estimates, while a wrong formula (e.g. erf-GELU, a missing
// term) misses by far more.
inline constexpr double kU = 1.0 / (1 << 24);
inline constexpr double kMargin = 2.0;
// Below fp32's normal range (2^-126) there is no relative precision: a sigmoid
// that underflows (or whose exp overflows to inf, x < -88.7) is off by up to
// this much absolutely.
inline constexpr double kTiny = 1.1754943508222875e-38;  // 2^-126

inline constexpr double kGeluK = 0.79788456080286535588;  // sqrt(2 / pi)
inline constexpr double kGeluC = 0.044715;

inline double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(kGeluK * (x + kGeluC * x * x * x)));
}
inline double gelu_grad(double x) {
  const double t = std::tanh(kGeluK * (x + kGeluC * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluK * (1.0 + 3.0 * kGeluC * x * x);
}
inline double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
inline double silu(double x) {
  return x * sigmoid(x);
}
inline double silu_grad(double x) {
  const double s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

// GELU's fp32 error. z = k (x + c x^3) has ~5 roundings plus k and c rounded to
// fp32 (no cancellation: x and c x^3 share a sign): |dz| <= 7u |z|. Then
// |dt| <= (1 - t^2)|dz| + 8u <= 0.45 * 7u + 8u < 12u, as z sech^2 z <= 0.448.
inline constexpr double kGeluDt = 12 * kU;
// y = x (1 + t) / 2: |dy| <= |x| |dt| / 2 + 3u |y|.
inline double gelu_bound(double x) {
  return 0.5 * std::fabs(x) * kGeluDt + 3 * kU * std::fabs(gelu(x));
}
// gelu' = (1 + t)/2 + a (1 - t^2) / 2, a = x k (1 + 3 c x^2). The error in t
// reaches (1 - t^2) as 2|dt| + u, amplified by |a|/2 (this dominates for
// |x| > 2: the bound there is loose, the cancellation in 1 - t^2 being inherent
// to any few-ulp tanhf); about 8 further roundings on the result.
inline double gelu_grad_bound(double x) {
  const double a = std::fabs(x) * kGeluK * (1.0 + 3.0 * kGeluC * x * x);
  return 0.5 * kGeluDt + 0.5 * a * (2 * kGeluDt + kU) + 8 * kU * std::fabs(gelu_grad(x));
}

// The exact GELU, x Phi(x) (Hugging Face's "gelu"), and its derivative
// Phi(x) + x phi(x).
inline constexpr double kInvSqrt2 = 0.70710678118654752440;
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;
inline double gelu_erf(double x) {
  return 0.5 * x * (1.0 + std::erf(x * kInvSqrt2));
}
inline double gelu_erf_grad(double x) {
  return 0.5 * (1.0 + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
}
// Its fp32 error. z = x / sqrt 2 costs 2u |z| (the constant and the product);
// erff is within 4 ulp (8u |erf|) and passes |dz| on times erf'(z) = (2 /
// sqrt pi) e^{-z^2}, with z e^{-z^2} (2 / sqrt pi) <= 0.49: |de| <= 8u + u = 9u.
// y = x (1 + e) / 2: |dy| <= |x| |de| / 2 + 3u |y|.
inline constexpr double kGeluErfDe = 9 * kU;
inline double gelu_erf_bound(double x) {
  return 0.5 * std::fabs(x) * kGeluErfDe + 3 * kU * std::fabs(gelu_erf(x));
}
// gelu' = (1 + e) / 2 + x c exp(-x^2 / 2): the first term is off by
// |de| / 2 + u; in the second, -x^2/2 carries 2u relative, which exp turns
// into an absolute u x^2 on its argument, plus its own 8u: relative
// (u x^2 + 8u), and 3 more roundings; about 2 further roundings on the sum.
inline double gelu_erf_grad_bound(double x) {
  const double second = std::fabs(x) * kInvSqrt2Pi * std::exp(-0.5 * x * x);
  return 0.5 * kGeluErfDe + kU + second * (kU * x * x + 11 * kU) +
         2 * kU * std::fabs(gelu_erf_grad(x));
}

// sigmoid = 1 / (1 + e), e = exp(-x) to 8u relative; the add costs u and the
// divide up to 2u (on the simd path -ffast-math makes it a reciprocal estimate
// refined by one Newton step): |ds| <= 11u s (+ kTiny where s leaves the
// normal range).
inline double sigmoid_bound(double x) {
  return 11 * kU * sigmoid(x) + kTiny;
}
// silu = x s: |d silu| <= |x| |ds| + u |silu|.
inline double silu_bound(double x) {
  return std::fabs(x) * sigmoid_bound(x) + kU * std::fabs(silu(x));
}
// silu' = s (1 + x (1 - s)): the error of s enters through the factor s and
// through x (1 - s), |d| <= |ds| (1 + |x| (1 - s)) + s |x| (|ds| + u (1 - s)),
// and ~4 further roundings: + 4u |silu'|.
inline double silu_grad_bound(double x) {
  const double s = sigmoid(x), ds = sigmoid_bound(x), ax = std::fabs(x);
  return ds * (1.0 + ax * (1.0 - s)) + s * ax * (ds + kU * (1.0 - s)) +
         4 * kU * std::fabs(silu_grad(x));
}

}  // namespace colrow::activation_error_model
