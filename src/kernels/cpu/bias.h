// Bias kernels for token-major activations.
//   y: [tokens, features], b: [features]
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::kernels::cpu {

// y[t, j] += b[j]
void add_bias(Tensor& y, const Tensor& b);
// db[j] += sum over t of dy[t, j]   (accumulates, like every parameter gradient)
void accumulate_bias_grad(const Tensor& dy, Tensor& db);

}  // namespace colrow::kernels::cpu
