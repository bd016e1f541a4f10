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

}  // namespace colrow::kernels
