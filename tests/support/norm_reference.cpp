// LayerNorm and RMSNorm in double, straight from their definitions: the
// backward is the textbook chain rule through mean and variance, written
// independently of src/kernels/cpu/norm.cpp.
#include "support/norm_reference.h"

#include <cmath>

namespace colrow::reference {

NormResult layer_norm(const Matrix& x, const Matrix& gamma, const Matrix& beta, const Matrix& dy,
                      int64_t tokens, int64_t d, double eps) {
  NormResult r;
  r.y.assign(tokens * d, 0.0);
  r.dx.assign(tokens * d, 0.0);
  r.dgamma.assign(d, 0.0);
  r.dbeta.assign(d, 0.0);
  r.mean.assign(tokens, 0.0);
  r.rstd.assign(tokens, 0.0);
  r.y_mag.assign(tokens * d, 0.0);
  r.dx_mag.assign(tokens * d, 0.0);
  r.dgamma_mag.assign(d, 0.0);
  r.dbeta_mag.assign(d, 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    const double* xr = &x[t * d];
    const double* dyr = &dy[t * d];
    double mu = 0.0;
    for (int64_t j = 0; j < d; ++j) mu += xr[j];
    mu /= d;
    double var = 0.0;
    for (int64_t j = 0; j < d; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= d;
    const double rs = 1.0 / std::sqrt(var + eps);
    r.mean[t] = mu;
    r.rstd[t] = rs;
    // y = xhat gamma + beta, xhat = (x - mu) rs. With L = sum y dy:
    //   dL/dxhat_j = dy_j gamma_j =: g_j
    //   dL/dvar = sum_j g_j (x_j - mu) (-1/2) rs^3
    //   dL/dmu = -rs sum_j g_j + dL/dvar * (-2/d) sum_j (x_j - mu)   (the last sum is 0)
    //   dx_j = g_j rs + dL/dvar * 2 (x_j - mu) / d + dL/dmu / d
    double dvar = 0.0, sum_g = 0.0, sum_abs_g = 0.0, sum_g_xa = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      const double g = dyr[j] * gamma[j];
      const double xa = rs * (std::fabs(xr[j] - mu) + std::fabs(mu));
      dvar += g * (xr[j] - mu) * -0.5 * rs * rs * rs;
      sum_g += g;
      sum_abs_g += std::fabs(g);
      sum_g_xa += std::fabs(g) * xa;
    }
    const double dmu = -rs * sum_g;
    for (int64_t j = 0; j < d; ++j) {
      const double xhat = (xr[j] - mu) * rs;
      const double g = dyr[j] * gamma[j];
      const double xa = rs * (std::fabs(xr[j] - mu) + std::fabs(mu));
      r.y[t * d + j] = xhat * gamma[j] + beta[j];
      r.dx[t * d + j] = g * rs + dvar * 2.0 * (xr[j] - mu) / d + dmu / d;
      r.dgamma[j] += dyr[j] * xhat;
      r.dbeta[j] += dyr[j];
      r.y_mag[t * d + j] = std::fabs(gamma[j]) * xa + std::fabs(beta[j]);
      r.dx_mag[t * d + j] = rs * (std::fabs(g) + sum_abs_g / d + xa * sum_g_xa / d);
      r.dgamma_mag[j] += std::fabs(dyr[j]) * xa;
      r.dbeta_mag[j] += std::fabs(dyr[j]);
    }
  }
  return r;
}

NormResult rms_norm(const Matrix& x, const Matrix& weight, const Matrix& dy, int64_t tokens,
                    int64_t d, double eps) {
  NormResult r;
  r.y.assign(tokens * d, 0.0);
  r.dx.assign(tokens * d, 0.0);
  r.dgamma.assign(d, 0.0);
  r.rstd.assign(tokens, 0.0);
  r.y_mag.assign(tokens * d, 0.0);
  r.dx_mag.assign(tokens * d, 0.0);
  r.dgamma_mag.assign(d, 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    const double* xr = &x[t * d];
    const double* dyr = &dy[t * d];
    double ms = 0.0;
    for (int64_t j = 0; j < d; ++j) ms += xr[j] * xr[j];
    ms /= d;
    const double rs = 1.0 / std::sqrt(ms + eps);
    r.rstd[t] = rs;
    // y_j = w_j x_j rs, rs = (ms + eps)^(-1/2), d rs / d x_k = -rs^3 x_k / d:
    //   dx_k = dy_k w_k rs - rs^3 x_k / d * sum_j dy_j w_j x_j
    double s = 0.0, sum_abs_g = 0.0, sum_g_xa = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      s += dyr[j] * weight[j] * xr[j];
      sum_g_xa += std::fabs(dyr[j] * weight[j]) * rs * std::fabs(xr[j]);
      sum_abs_g += std::fabs(dyr[j] * weight[j]);
    }
    for (int64_t j = 0; j < d; ++j) {
      const double xa = rs * std::fabs(xr[j]);
      const double g = dyr[j] * weight[j];
      r.y[t * d + j] = weight[j] * xr[j] * rs;
      r.dx[t * d + j] = g * rs - rs * rs * rs * xr[j] / d * s;
      r.dgamma[j] += dyr[j] * xr[j] * rs;
      r.y_mag[t * d + j] = std::fabs(weight[j]) * xa;
      r.dx_mag[t * d + j] = rs * (std::fabs(g) + sum_abs_g / d + xa * sum_g_xa / d);
      r.dgamma_mag[j] += std::fabs(dyr[j]) * xa;
    }
  }
  return r;
}

}  // namespace colrow::reference
