// Operand check of the element-wise kernels (activations, residual adds),
// shared by kernels/{cpu,cuda}/activation and kernels/{cpu,cuda}/residual:
// they walk flat arrays, so every operand is contiguous and of one shape.
#pragma once

#include <initializer_list>
#include <string>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"

namespace colrow::kernels {

// first and each of others, in order: contiguous, of first's shape.
// component names the family in the message ("activation", "residual").
inline void check_elementwise(const char* component, const char* what, const Tensor& first,
                              std::initializer_list<const Tensor*> others) {
  for (const Tensor* t : others) {
    if (!first.is_contiguous() || !t->is_contiguous() || first.shape() != t->shape()) {
      throw InternalError(std::string("[") + component + "] " + what +
                          ": operands must be contiguous and of one shape, got " +
                          shape_to_string(first.shape()) + " and " + shape_to_string(t->shape()));
    }
  }
}

// The same for kernels that also take 2-d views with strided rows (SwiGLU's
// gate and up as column blocks of one fused projection's output): every
// operand [rows, cols] of first's shape with a contiguous last dim, or all
// contiguous.
inline void check_elementwise_rows(const char* component, const char* what, const Tensor& first,
                                   std::initializer_list<const Tensor*> others) {
  auto rows = [](const Tensor& t) {
    return t.is_contiguous() || (t.ndim() == 2 && t.stride(1) == 1);
  };
  for (const Tensor* t : others) {
    if (!rows(first) || !rows(*t) || first.shape() != t->shape()) {
      throw InternalError(std::string("[") + component + "] " + what +
                          ": operands must be of one shape, contiguous or [rows, cols] with a "
                          "contiguous last dim, got " +
                          shape_to_string(first.shape()) + " and " + shape_to_string(t->shape()));
    }
  }
}

}  // namespace colrow::kernels
