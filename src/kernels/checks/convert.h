// Operand check of ops::convert, shared by kernels/{cpu,cuda}/convert: both
// tensors contiguous and of one shape, each fp32 or bf16.
#pragma once

#include <string>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"
#include "kernels/checks/elementwise.h"

namespace colrow::kernels {

inline void check_convert(const Tensor& src, const Tensor& dst) {
  check_elementwise("convert", "convert", src, {&dst});
}

}  // namespace colrow::kernels
