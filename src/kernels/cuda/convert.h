// CUDA twin of kernels/cpu/convert.h: dst = src across fp32 and bf16
// (Tensor::convert_from's kernel: one thread per element, rounding to nearest
// even like the CPU, bitwise equal). Contiguous, one shape.
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::kernels::cuda {

void convert(const Tensor& src, Tensor& dst);

// kernels/mixed_precision.h's widened and store_rounded on the GPU: t itself
// when fp32, else a contiguous fp32 copy; dst (any dtype, a contiguous tensor
// or 2-d view of src's shape) = src rounded once.
Tensor as_f32(const Tensor& t);
void store_converted(const Tensor& src, Tensor& dst);

}  // namespace colrow::kernels::cuda
