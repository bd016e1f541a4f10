// Checks shared by LayerNorm and RMSNorm (private to src/nn).
#pragma once

#include <cmath>
#include <sstream>
#include <string>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"

namespace colrow::norm_checks {

// ConfigError unless d >= 1 and eps is finite and >= 0; returns d.
inline int64_t validated_d(const char* component, const std::string& name, int64_t d, float eps,
                           const char* eps_fix) {
  if (d < 1) {
    throw ConfigError(std::string("[") + component + "] " + name + ".d (" + std::to_string(d) +
                      ") must be positive.");
  }
  if (!(std::isfinite(eps) && eps >= 0.0f)) {
    std::ostringstream value;
    value << eps;
    throw ConfigError(std::string("[") + component + "] " + name + ".eps (" + value.str() +
                      ") must be finite and >= 0. " + eps_fix);
  }
  return d;
}

// InternalError unless t is [tokens, d].
inline void require_tokens_by(const char* component, const Tensor& t, int64_t d,
                              const std::string& name, const char* what) {
  if (t.ndim() != 2 || t.size(1) != d) {
    throw InternalError(std::string("[") + component + "] " + name + ": " + what + " " +
                        shape_to_string(t.shape()) + " must be [tokens, " + std::to_string(d) +
                        "]");
  }
}

// InternalError unless dy is [tokens, d] with the forward input x's tokens.
inline void require_dy_like_x(const char* component, const Tensor& dy, const Tensor& x, int64_t d,
                              const std::string& name) {
  require_tokens_by(component, dy, d, name, "dy");
  if (dy.size(0) != x.size(0)) {
    throw InternalError(std::string("[") + component + "] " + name + ": dy " +
                        shape_to_string(dy.shape()) + " must match the forward input " +
                        shape_to_string(x.shape()));
  }
}

}  // namespace colrow::norm_checks
