// LayerNorm and RMSNorm kernels: OpenMP over tokens for the activations, over
// (token block, feature block) for the parameter gradients, whose sums over
// tokens follow parallel.h's fixed row blocks (no two threads write one
// element, and the sum order does not depend on the thread count).
// Activations and weights are fp32 or bf16, read natively (each element
// widened as read, each output rounded once); statistics and parameter
// gradients are fp32. A fused residual add (norm.h) writes the sum's row
// first and normalizes it from there, and adds the residual's gradient to
// dx's row after writing it, each while the row is in L1.
#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "colrow/core/bfloat16.h"
#include "kernels/checks/norm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elements.h"

namespace colrow::kernels::cpu {
namespace {

// Features per task in the parameter gradients: with this bound the compiler
// unrolls a task's row loop two rows at a time (measured: wider is slower).
constexpr int64_t kNormWidth = 64;

// The row a norm reads: x's own, or, with a residual, x + residual rounded
// to E once and written to sum's row first (the fused residual add).
template <typename E>
const E* input_row(const E* xr, const E* rr, E* sr, int64_t d) {
  if (rr == nullptr) return xr;
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) sr[j] = narrow<E>(widen(xr[j]) + widen(rr[j]));
  return sr;
}

// dx's row += the residual's gradient, when there is one: a second pass over
// the row just written (in L1), so the hot loop has no branch and the stored
// value is added, rounded once more, as the separate add does.
template <typename E>
void add_residual_grad(E* dxr, const E* dresr, int64_t d) {
  if (dresr == nullptr) return;
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) dxr[j] = narrow<E>(widen(dresr[j]) + widen(dxr[j]));
}

// An optional operand's elements (null when absent); x stands in for an
// absent one in the dtype check.
template <typename E>
const E* elements_or_null(const Tensor* t) {
  return t != nullptr ? elements<E>(*t) : nullptr;
}
template <typename E>
E* elements_or_null(Tensor* t) {
  return t != nullptr ? elements<E>(*t) : nullptr;
}
const Tensor* or_x(const Tensor* t, const Tensor& x) { return t != nullptr ? t : &x; }

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd, const Tensor* residual,
                        Tensor* sum) {
  check_layer_norm_forward(x, gamma, beta, y, mean, rstd);
  check_norm_residual(x, residual, sum, "layer_norm_forward");
  const int64_t tokens = x.size(0), d = x.size(1);
  const int64_t ldx = x.row_stride(), ldy = y.row_stride();
  const int64_t ldr = residual != nullptr ? residual->row_stride() : 0;
  const int64_t lds = sum != nullptr ? sum->row_stride() : 0;
  float *mean_out = mean.data(), *rstd_out = rstd.data();
  with_element_type("layer_norm_forward", {&x, &gamma, &beta, &y, or_x(residual, x), or_x(sum, x)},
                    [&](auto e) {
    using E = decltype(e);
    const E *in = elements<E>(x), *g = elements<E>(gamma), *b = elements<E>(beta);
    const E* res = elements_or_null<E>(residual);
    E* summed = elements_or_null<E>(sum);
    E* out = elements<E>(y);
#pragma omp parallel for schedule(static) if (tokens * d > kParallelElements)
    for (int64_t t = 0; t < tokens; ++t) {
      const E* xr = input_row(in + t * ldx, res != nullptr ? res + t * ldr : nullptr,
                              summed != nullptr ? summed + t * lds : nullptr, d);
      const double mu =
          lane_sum(d, [&](int64_t j) -> double { return widen(xr[j]); }) / static_cast<double>(d);
      // Second pass about the mean: no cancellation when |mean| >> std.
      const double sq = lane_sum(d, [&](int64_t j) {
        const double c = widen(xr[j]) - mu;
        return c * c;
      });
      const float m = static_cast<float>(mu);
      const float r = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(d) + eps));
      mean_out[t] = m;
      rstd_out[t] = r;
      E* yr = out + t * ldy;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) {
        yr[j] = narrow<E>((widen(xr[j]) - m) * r * widen(g[j]) + widen(b[j]));
      }
    }
  });
}

void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                         Tensor& dbeta, const Tensor* dresidual) {
  check_layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  check_norm_dresidual(dx, dresidual, "layer_norm_backward");
  const int64_t tokens = x.size(0), d = x.size(1);
  const int64_t ldx = x.row_stride(), lddy = dy.row_stride(), lddx = dx.row_stride();
  const int64_t lddr = dresidual != nullptr ? dresidual->row_stride() : 0;
  const float *mean_in = mean.data(), *rstd_in = rstd.data();
  float *dg = dgamma.data(), *db = dbeta.data();
  const double inv_d = 1.0 / static_cast<double>(d);
  with_element_type("layer_norm_backward", {&x, &gamma, &dy, &dx, or_x(dresidual, x)},
                    [&](auto e) {
    using E = decltype(e);
    const E *in = elements<E>(x), *g = elements<E>(gamma), *grad = elements<E>(dy);
    const E* dres = elements_or_null<E>(dresidual);
    E* dx_out = elements<E>(dx);

    // dx: rows are independent.
#pragma omp parallel for schedule(static) if (tokens * d > kParallelElements)
    for (int64_t t = 0; t < tokens; ++t) {
      const E *xr = in + t * ldx, *dyr = grad + t * lddy;
      const float m = mean_in[t], r = rstd_in[t];
      const auto [sum_g, sum_gx] = lane_sums(d, [&](int64_t j) {
        const float gj = widen(dyr[j]) * widen(g[j]);
        const float xhat = (widen(xr[j]) - m) * r;
        return std::pair<double, double>{gj, static_cast<double>(gj) * xhat};
      });
      const float mean_g = static_cast<float>(sum_g * inv_d);
      const float mean_gx = static_cast<float>(sum_gx * inv_d);
      E* dxr = dx_out + t * lddx;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) {
        const float xhat = (widen(xr[j]) - m) * r;
        dxr[j] = narrow<E>(r * (widen(dyr[j]) * widen(g[j]) - mean_g - xhat * mean_gx));
      }
      add_residual_grad(dxr, dres != nullptr ? dres + t * lddr : nullptr, d);
    }

    // dgamma, dbeta: sums over tokens in double.
    column_sums<kNormWidth, double, 2>(
        tokens, d,
        [&](int64_t r0, int64_t r1, int64_t j0, int64_t j1, double* sums, int64_t ld) {
          const int64_t n = j1 - j0;
          double sum_gamma[kNormWidth] = {}, sum_beta[kNormWidth] = {};
          for (int64_t t = r0; t < r1; ++t) {
            const E *xr = in + t * ldx + j0, *dyr = grad + t * lddy + j0;
            const float m = mean_in[t], r = rstd_in[t];
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) {
              const float xhat = (widen(xr[j]) - m) * r;
              sum_gamma[j] += static_cast<double>(widen(dyr[j])) * xhat;
              sum_beta[j] += widen(dyr[j]);
            }
          }
          std::copy(sum_gamma, sum_gamma + n, sums);
          std::copy(sum_beta, sum_beta + n, sums + ld);
        },
        [&](int64_t j0, int64_t j1, const double* total, int64_t ld) {
          for (int64_t j = 0; j < j1 - j0; ++j) {
            dg[j0 + j] += static_cast<float>(total[j]);
            db[j0 + j] += static_cast<float>(total[ld + j]);
          }
        });
  });
}

void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd,
                      const Tensor* residual, Tensor* sum) {
  check_rms_norm_forward(x, weight, y, rstd);
  check_norm_residual(x, residual, sum, "rms_norm_forward");
  const int64_t tokens = x.size(0), d = x.size(1);
  const int64_t ldx = x.row_stride(), ldy = y.row_stride();
  const int64_t ldr = residual != nullptr ? residual->row_stride() : 0;
  const int64_t lds = sum != nullptr ? sum->row_stride() : 0;
  float* rstd_out = rstd.data();
  with_element_type("rms_norm_forward", {&x, &weight, &y, or_x(residual, x), or_x(sum, x)},
                    [&](auto e) {
    using E = decltype(e);
    const E *in = elements<E>(x), *w = elements<E>(weight);
    const E* res = elements_or_null<E>(residual);
    E* summed = elements_or_null<E>(sum);
    E* out = elements<E>(y);
#pragma omp parallel for schedule(static) if (tokens * d > kParallelElements)
    for (int64_t t = 0; t < tokens; ++t) {
      const E* xr = input_row(in + t * ldx, res != nullptr ? res + t * ldr : nullptr,
                              summed != nullptr ? summed + t * lds : nullptr, d);
      const double sq = lane_sum(d, [&](int64_t j) {
        const double v = widen(xr[j]);
        return v * v;
      });
      const float r = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(d) + eps));
      rstd_out[t] = r;
      E* yr = out + t * ldy;
      // HF order: weight * (x * rsqrt(mean(x^2) + eps)).
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) yr[j] = narrow<E>(widen(w[j]) * (widen(xr[j]) * r));
    }
  });
}

void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                       Tensor& dx, Tensor& dweight, const Tensor* dresidual) {
  check_rms_norm_backward(x, weight, rstd, dy, dx, dweight);
  check_norm_dresidual(dx, dresidual, "rms_norm_backward");
  const int64_t tokens = x.size(0), d = x.size(1);
  const int64_t ldx = x.row_stride(), lddy = dy.row_stride(), lddx = dx.row_stride();
  const int64_t lddr = dresidual != nullptr ? dresidual->row_stride() : 0;
  const float* rstd_in = rstd.data();
  float* dw = dweight.data();
  const double inv_d = 1.0 / static_cast<double>(d);
  with_element_type("rms_norm_backward", {&x, &weight, &dy, &dx, or_x(dresidual, x)},
                    [&](auto e) {
    using E = decltype(e);
    const E *in = elements<E>(x), *w = elements<E>(weight), *grad = elements<E>(dy);
    const E* dres = elements_or_null<E>(dresidual);
    E* dx_out = elements<E>(dx);

#pragma omp parallel for schedule(static) if (tokens * d > kParallelElements)
    for (int64_t t = 0; t < tokens; ++t) {
      const E *xr = in + t * ldx, *dyr = grad + t * lddy;
      const float r = rstd_in[t];
      const double sum_gx = lane_sum(d, [&](int64_t j) {
        return static_cast<double>(widen(dyr[j]) * widen(w[j])) * (widen(xr[j]) * r);
      });
      const float mean_gx = static_cast<float>(sum_gx * inv_d);
      E* dxr = dx_out + t * lddx;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) {
        dxr[j] = narrow<E>(r * (widen(dyr[j]) * widen(w[j]) - (widen(xr[j]) * r) * mean_gx));
      }
      add_residual_grad(dxr, dres != nullptr ? dres + t * lddr : nullptr, d);
    }

    column_sums<kNormWidth, double, 1>(
        tokens, d,
        [&](int64_t r0, int64_t r1, int64_t j0, int64_t j1, double* sums, int64_t) {
          const int64_t n = j1 - j0;
          double sum[kNormWidth] = {};
          for (int64_t t = r0; t < r1; ++t) {
            const E *xr = in + t * ldx + j0, *dyr = grad + t * lddy + j0;
            const float r = rstd_in[t];
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) {
              sum[j] += static_cast<double>(widen(dyr[j])) * (widen(xr[j]) * r);
            }
          }
          std::copy(sum, sum + n, sums);
        },
        [&](int64_t j0, int64_t j1, const double* total, int64_t) {
          for (int64_t j = 0; j < j1 - j0; ++j) dw[j0 + j] += static_cast<float>(total[j]);
        });
  });
}

}  // namespace colrow::kernels::cpu
