// The CUDA twin of kernels/cpu/reduce.h: the sum of squares over many tensors
// (for gradient norms), in double and in a fixed order, and an element-wise
// division. Semantics are documented there. All parts live on one GPU.
#pragma once

#include <vector>

#include "colrow/core/tensor.h"

namespace colrow::kernels::cuda {

// parts: contiguous -> sum over every part of sum_i x_i^2 (double; waits for
// the GPU). The same bits every run; the order differs from the CPU's, so the
// two agree to about n 2^-53 relative, not bit for bit.
double sum_of_squares(const std::vector<Tensor>& parts);
// x /= divisor element-wise (IEEE division, as on the CPU). x contiguous.
void divide(Tensor& x, float divisor);

}  // namespace colrow::kernels::cuda
