// LayerNorm and RMSNorm kernels: OpenMP over tokens for the activations, over
// (token block, feature block) for the parameter gradients, whose sums over
// tokens follow parallel.h's fixed row blocks (no two threads write one
// element, and the sum order does not depend on the thread count).
#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>

#include "kernels/checks/norm.h"
#include "kernels/cpu/parallel.h"

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
  const float *in = x.data(), *g = gamma.data(), *b = beta.data();
  float *out = y.data(), *mean_out = mean.data(), *rstd_out = rstd.data();
#pragma omp parallel for schedule(static) if (tokens * d > kParallelElements)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xr = in + t * ldx;
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < d; ++j) sum += xr[j];
    const double mu = sum / static_cast<double>(d);
    // Second pass about the mean: no cancellation when |mean| >> std.
    double sq = 0.0;
#pragma omp simd reduction(+ : sq)
    for (int64_t j = 0; j < d; ++j) {
      const double c = xr[j] - mu;
      sq += c * c;
    }
    const float m = static_cast<float>(mu);
    const float r = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(d) + eps));
    mean_out[t] = m;
    rstd_out[t] = r;
    float* yr = out + t * ldy;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - m) * r * g[j] + b[j];
  }
}

void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                         Tensor& dbeta) {
  check_layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  const int64_t tokens = x.size(0), d = x.size(1);
  const int64_t ldx = x.row_stride(), lddy = dy.row_stride(), lddx = dx.row_stride();
  const float *in = x.data(), *g = gamma.data(), *grad = dy.data();
  const float *mean_in = mean.data(), *rstd_in = rstd.data();
  float* dx_out = dx.data();
  const double inv_d = 1.0 / static_cast<double>(d);

  // dx: rows are independent.
#pragma omp parallel for schedule(static) if (tokens * d > kParallelElements)
  for (int64_t t = 0; t < tokens; ++t) {
    const float *xr = in + t * ldx, *dyr = grad + t * lddy;
    const float m = mean_in[t], r = rstd_in[t];
    double sum_g = 0.0, sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int64_t j = 0; j < d; ++j) {
      const float gj = dyr[j] * g[j];
      const float xhat = (xr[j] - m) * r;
      sum_g += gj;
      sum_gx += static_cast<double>(gj) * xhat;
    }
    const float mean_g = static_cast<float>(sum_g * inv_d);
    const float mean_gx = static_cast<float>(sum_gx * inv_d);
    float* dxr = dx_out + t * lddx;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) {
      const float xhat = (xr[j] - m) * r;
      dxr[j] = r * (dyr[j] * g[j] - mean_g - xhat * mean_gx);
    }
  }

  // dgamma, dbeta: sums over tokens in double.
  float *dg = dgamma.data(), *db = dbeta.data();
  column_sums<kNormWidth, double, 2>(
      tokens, d,
      [&](int64_t r0, int64_t r1, int64_t j0, int64_t j1, double* sums, int64_t ld) {
        const int64_t n = j1 - j0;
        double sum_gamma[kNormWidth] = {}, sum_beta[kNormWidth] = {};
        for (int64_t t = r0; t < r1; ++t) {
          const float *xr = in + t * ldx + j0, *dyr = grad + t * lddy + j0;
          const float m = mean_in[t], r = rstd_in[t];
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) {
            const float xhat = (xr[j] - m) * r;
            sum_gamma[j] += static_cast<double>(dyr[j]) * xhat;
            sum_beta[j] += dyr[j];
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
}

void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd) {
  check_rms_norm_forward(x, weight, y, rstd);
  const int64_t tokens = x.size(0), d = x.size(1);
  const int64_t ldx = x.row_stride(), ldy = y.row_stride();
  const float *in = x.data(), *w = weight.data();
  float *out = y.data(), *rstd_out = rstd.data();
#pragma omp parallel for schedule(static) if (tokens * d > kParallelElements)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xr = in + t * ldx;
    double sq = 0.0;
#pragma omp simd reduction(+ : sq)
    for (int64_t j = 0; j < d; ++j) sq += static_cast<double>(xr[j]) * xr[j];
    const float r = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(d) + eps));
    rstd_out[t] = r;
    float* yr = out + t * ldy;
    // HF order: weight * (x * rsqrt(mean(x^2) + eps)).
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) yr[j] = w[j] * (xr[j] * r);
  }
}

void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                       Tensor& dx, Tensor& dweight) {
  check_rms_norm_backward(x, weight, rstd, dy, dx, dweight);
  const int64_t tokens = x.size(0), d = x.size(1);
  const int64_t ldx = x.row_stride(), lddy = dy.row_stride(), lddx = dx.row_stride();
  const float *in = x.data(), *w = weight.data(), *grad = dy.data(), *rstd_in = rstd.data();
  float* dx_out = dx.data();
  const double inv_d = 1.0 / static_cast<double>(d);

#pragma omp parallel for schedule(static) if (tokens * d > kParallelElements)
  for (int64_t t = 0; t < tokens; ++t) {
    const float *xr = in + t * ldx, *dyr = grad + t * lddy;
    const float r = rstd_in[t];
    double sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_gx)
    for (int64_t j = 0; j < d; ++j) sum_gx += static_cast<double>(dyr[j] * w[j]) * (xr[j] * r);
    const float mean_gx = static_cast<float>(sum_gx * inv_d);
    float* dxr = dx_out + t * lddx;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) dxr[j] = r * (dyr[j] * w[j] - (xr[j] * r) * mean_gx);
  }

  float* dw = dweight.data();
  column_sums<kNormWidth, double, 1>(
      tokens, d,
      [&](int64_t r0, int64_t r1, int64_t j0, int64_t j1, double* sums, int64_t) {
        const int64_t n = j1 - j0;
        double sum[kNormWidth] = {};
        for (int64_t t = r0; t < r1; ++t) {
          const float *xr = in + t * ldx + j0, *dyr = grad + t * lddy + j0;
          const float r = rstd_in[t];
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) sum[j] += static_cast<double>(dyr[j]) * (xr[j] * r);
        }
        std::copy(sum, sum + n, sums);
      },
      [&](int64_t j0, int64_t j1, const double* total, int64_t) {
        for (int64_t j = 0; j < j1 - j0; ++j) dw[j0 + j] += static_cast<float>(total[j]);
      });
}

}  // namespace colrow::kernels::cpu
