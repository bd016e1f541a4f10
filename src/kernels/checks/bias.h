// Operand check of the bias kernels, shared by kernels/cpu/bias.cpp and
// kernels/cuda/bias.cu: y: [tokens, features] with a contiguous last dim,
// b: [features], contiguous.
#pragma once

#include <string>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"

namespace colrow::kernels {

inline void check_bias(const Tensor& y, const Tensor& b, const char* what) {
  if (y.ndim() != 2 || y.stride(1) != 1 || b.ndim() != 1 || !b.is_contiguous() ||
      b.size(0) != y.size(1)) {
    throw InternalError(std::string("[bias] ") + what + ": activations " +
                        shape_to_string(y.shape()) + " and bias " + shape_to_string(b.shape()) +
                        " do not match");
  }
}

}  // namespace colrow::kernels
