// Operand checks of the LayerNorm and RMSNorm kernels, shared by
// kernels/cpu/norm.cpp and kernels/cuda/norm.cu so both refuse the same
// shapes with the same messages, in the same order.
//   x, y, dy, dx: [tokens, d] with contiguous rows
//   gamma, beta, weight, dgamma, dbeta, dweight: [d]; mean, rstd: [tokens]
#pragma once

#include <cstdint>
#include <string>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"

namespace colrow::kernels {

// t: [tokens, d] with a contiguous last dim.
inline void require_norm_rows(const Tensor& t, int64_t tokens, int64_t d, const char* kernel,
                              const char* what) {
  if (t.ndim() != 2 || t.size(0) != tokens || t.size(1) != d || (d > 1 && t.stride(1) != 1)) {
    throw InternalError(std::string("[norm] ") + kernel + ": " + what + " " +
                        shape_to_string(t.shape()) + " must be [" + std::to_string(tokens) + ", " +
                        std::to_string(d) + "] with contiguous rows");
  }
}

// t: [n], contiguous.
inline void require_norm_vector(const Tensor& t, int64_t n, const char* kernel, const char* what) {
  if (t.ndim() != 1 || t.size(0) != n || !t.is_contiguous()) {
    throw InternalError(std::string("[norm] ") + kernel + ": " + what + " " +
                        shape_to_string(t.shape()) + " must be [" + std::to_string(n) + "]");
  }
}

// x: [tokens, d] with contiguous rows; its sizes are what the other operands must match.
inline void require_norm_input(const Tensor& x, const char* kernel) {
  if (x.ndim() != 2) {
    throw InternalError(std::string("[norm] ") + kernel + ": x " + shape_to_string(x.shape()) +
                        " must be [tokens, d]");
  }
  require_norm_rows(x, x.size(0), x.size(1), kernel, "x");
}

inline void check_layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  const char* k = "layer_norm_forward";
  require_norm_input(x, k);
  const int64_t tokens = x.size(0), d = x.size(1);
  require_norm_rows(y, tokens, d, k, "y");
  require_norm_vector(gamma, d, k, "gamma");
  require_norm_vector(beta, d, k, "beta");
  require_norm_vector(mean, tokens, k, "mean");
  require_norm_vector(rstd, tokens, k, "rstd");
}

inline void check_layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                                      const Tensor& dgamma, const Tensor& dbeta) {
  const char* k = "layer_norm_backward";
  require_norm_input(x, k);
  const int64_t tokens = x.size(0), d = x.size(1);
  require_norm_rows(dy, tokens, d, k, "dy");
  require_norm_rows(dx, tokens, d, k, "dx");
  require_norm_vector(gamma, d, k, "gamma");
  require_norm_vector(mean, tokens, k, "mean");
  require_norm_vector(rstd, tokens, k, "rstd");
  require_norm_vector(dgamma, d, k, "dgamma");
  require_norm_vector(dbeta, d, k, "dbeta");
}

inline void check_rms_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& y,
                                   const Tensor& rstd) {
  const char* k = "rms_norm_forward";
  require_norm_input(x, k);
  const int64_t tokens = x.size(0), d = x.size(1);
  require_norm_rows(y, tokens, d, k, "y");
  require_norm_vector(weight, d, k, "weight");
  require_norm_vector(rstd, tokens, k, "rstd");
}

inline void check_rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                    const Tensor& dy, const Tensor& dx, const Tensor& dweight) {
  const char* k = "rms_norm_backward";
  require_norm_input(x, k);
  const int64_t tokens = x.size(0), d = x.size(1);
  require_norm_rows(dy, tokens, d, k, "dy");
  require_norm_rows(dx, tokens, d, k, "dx");
  require_norm_vector(weight, d, k, "weight");
  require_norm_vector(rstd, tokens, k, "rstd");
  require_norm_vector(dweight, d, k, "dweight");
}

// The fused residual add of the norms (kernels/cpu/norm.h). Forward:
// residual and sum come together, [tokens, d] like x. Backward: dresidual,
// when given, is [tokens, d] like dx.
inline void check_norm_residual(const Tensor& x, const Tensor* residual, const Tensor* sum,
                                const char* kernel) {
  if ((residual == nullptr) != (sum == nullptr)) {
    throw InternalError(std::string("[norm] ") + kernel +
                        ": a residual and the sum it makes come together (both or neither)");
  }
  if (residual == nullptr) return;
  require_norm_rows(*residual, x.size(0), x.size(1), kernel, "residual");
  require_norm_rows(*sum, x.size(0), x.size(1), kernel, "sum");
}

inline void check_norm_dresidual(const Tensor& dx, const Tensor* dresidual, const char* kernel) {
  if (dresidual != nullptr) require_norm_rows(*dresidual, dx.size(0), dx.size(1), kernel, "dresidual");
}

}  // namespace colrow::kernels
