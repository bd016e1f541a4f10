// CUDA twin of kernels/cpu/convert.h: dst = src across fp32 and bf16, one
// thread per element, rounding to nearest even like the CPU (bitwise equal).
// Contiguous, one shape.
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::kernels::cuda {

void convert(const Tensor& src, Tensor& dst);

}  // namespace colrow::kernels::cuda
