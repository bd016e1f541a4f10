// The residual stream's element-wise sums: out = a + b, and out += a.
// Shapes equal, contiguous (typically [tokens, d_model]).
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::kernels::cpu {

void add(const Tensor& a, const Tensor& b, Tensor& out);
void add_into(Tensor& out, const Tensor& a);

}  // namespace colrow::kernels::cpu
