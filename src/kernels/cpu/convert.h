// Element type conversion: dst = src, of one shape, contiguous. fp32 -> bf16
// rounds to nearest, ties to even (core/bfloat16.h); bf16 -> fp32 is exact;
// the same dtype copies. Mixed precision makes its bf16 compute copies of the
// fp32 masters with it, and a bf16 export of a checkpoint.
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::kernels::cpu {

void convert(const Tensor& src, Tensor& dst);

// The bf16 operations' reference pattern: widen the inputs (exact), compute
// in fp32, round once into the output.
// t itself when fp32; else a contiguous fp32 copy of any view of it.
Tensor as_f32(const Tensor& t);
// dst (any dtype, any view of src's shape) = src (fp32), rounded once.
void store_converted(const Tensor& src, Tensor& dst);

}  // namespace colrow::kernels::cpu
