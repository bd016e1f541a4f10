// Element type conversion: dst = src, of one shape, contiguous. fp32 -> bf16
// rounds to nearest, ties to even (core/bfloat16.h); bf16 -> fp32 is exact;
// the same dtype copies. Mixed precision makes its bf16 compute copies of the
// fp32 masters with it, and a bf16 export of a checkpoint.
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::kernels::cpu {

void convert(const Tensor& src, Tensor& dst);

}  // namespace colrow::kernels::cpu
