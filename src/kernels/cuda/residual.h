// CUDA twin of kernels/cpu/residual.h: the residual stream's element-wise
// sums out = a + b and out += a, one fp32 add per element (so bitwise equal to
// the CPU's). Shapes equal, contiguous (typically [tokens, d_model]).
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::kernels::cuda {

// a, b -> out = a + b, all one shape; out may be a or b.
void add(const Tensor& a, const Tensor& b, Tensor& out);
// out += a, one shape.
void add_into(Tensor& out, const Tensor& a);

}  // namespace colrow::kernels::cuda
