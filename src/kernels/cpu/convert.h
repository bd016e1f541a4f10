// Element type conversion: dst = src, of one shape, contiguous. fp32 -> bf16
// rounds to nearest, ties to even (core/bfloat16.h); bf16 -> fp32 is exact;
// the same dtype copies. Mixed precision makes its bf16 compute copies of the
// fp32 masters with it, and a bf16 export of a checkpoint.
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::kernels::cpu {

void convert(const Tensor& src, Tensor& dst);

// kernels/mixed_precision.h's widened and store_rounded on this device, for
// the kernels that take bf16 natively: t itself when fp32, else a contiguous
// fp32 copy of any view of it; dst (any dtype, any view of src's shape) =
// src (fp32), rounded once.
Tensor as_f32(const Tensor& t);
void store_converted(const Tensor& src, Tensor& dst);

}  // namespace colrow::kernels::cpu
