// CUDA twin of kernels/cpu/bias.h (same shapes and semantics, documented
// there). The bias gradient is a deterministic two-stage column sum: the same
// inputs give the same bits on every run.
//   y, dy: [tokens, features] (last dim contiguous; rows may be strided), b, db: [features]
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::kernels::cuda {

// y[t, j] += b[j]
void add_bias(Tensor& y, const Tensor& b);
// db[j] += sum over t of dy[t, j]   (accumulates, like every parameter gradient)
void accumulate_bias_grad(const Tensor& dy, Tensor& db);

}  // namespace colrow::kernels::cuda
