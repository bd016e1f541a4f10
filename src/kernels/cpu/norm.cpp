// LayerNorm and RMSNorm kernels: OpenMP over tokens for the activations, over
// (token block, feature block) for the parameter gradients, whose sums over
// tokens follow parallel.h's fixed row blocks (no two threads write one
// element, and the sum order does not depend on the thread count).
// Activations and weights are fp32 or bf16, read natively (each element
// widened as read, each output rounded once); statistics and parameter
// gradients are fp32.
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

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd) {
  check_layer_norm_forward(x, gamma, beta, y, mean, rstd);
  const int64_t tokens = x.size(0), d = x.size(1);
  const int64_t ldx = x.row_stride(), ldy = y.row_stride();
  float *mean_out = mean.data(), *rstd_out = rstd.data();
  with_element_type("layer_norm_forward", {&x, &gamma, &beta, &y}, [&](auto e) {
    using E = decltype(e);
    const E *in = elements<E>(x), *g = elements<E>(gamma), *b = elements<E>(beta);
    E* out = elements<E>(y);
#pragma omp parallel for schedule(static) if (tokens * d > kParallelElements)
    for (int64_t t = 0; t < tokens; ++t) {
      const E* xr = in + t * ldx;
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
                         Tensor& dbeta) {
  check_layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  const int64_t tokens = x.size(0), d = x.size(1);
  const int64_t ldx = x.row_stride(), lddy = dy.row_stride(), lddx = dx.row_stride();
  const float *mean_in = mean.data(), *rstd_in = rstd.data();
  float *dg = dgamma.data(), *db = dbeta.data();
  const double inv_d = 1.0 / static_cast<double>(d);
  with_element_type("layer_norm_backward", {&x, &gamma, &dy, &dx}, [&](auto e) {
    using E = decltype(e);
    const E *in = elements<E>(x), *g = elements<E>(gamma), *grad = elements<E>(dy);
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

void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd) {
  check_rms_norm_forward(x, weight, y, rstd);
  const int64_t tokens = x.size(0), d = x.size(1);
  const int64_t ldx = x.row_stride(), ldy = y.row_stride();
  float* rstd_out = rstd.data();
  with_element_type("rms_norm_forward", {&x, &weight, &y}, [&](auto e) {
    using E = decltype(e);
    const E *in = elements<E>(x), *w = elements<E>(weight);
    E* out = elements<E>(y);
#pragma omp parallel for schedule(static) if (tokens * d > kParallelElements)
    for (int64_t t = 0; t < tokens; ++t) {
      const E* xr = in + t * ldx;
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
                       Tensor& dx, Tensor& dweight) {
  check_rms_norm_backward(x, weight, rstd, dy, dx, dweight);
  const int64_t tokens = x.size(0), d = x.size(1);
  const int64_t ldx = x.row_stride(), lddy = dy.row_stride(), lddx = dx.row_stride();
  const float* rstd_in = rstd.data();
  float* dw = dweight.data();
  const double inv_d = 1.0 / static_cast<double>(d);
  with_element_type("rms_norm_backward", {&x, &weight, &dy, &dx}, [&](auto e) {
    using E = decltype(e);
    const E *in = elements<E>(x), *w = elements<E>(weight), *grad = elements<E>(dy);
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
