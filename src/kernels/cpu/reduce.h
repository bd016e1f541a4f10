// Reductions and scalings of whole tensors (gradient norms and averages).
#pragma once

#include <vector>

#include "colrow/core/tensor.h"

namespace colrow::kernels::cpu {

// sum over every part of sum_i x_i^2, accumulated in double, in a fixed order
// (the same bits for any thread count): each part in chunks of kChunkElements
// (parallel.h), summed in parallel, then the chunk sums in order. Parts:
// contiguous.
double sum_of_squares(const std::vector<Tensor>& parts);
// x /= divisor, element-wise (a division, not a multiplication by 1/divisor,
// so averages are correctly rounded). x contiguous.
void divide(Tensor& x, float divisor);

}  // namespace colrow::kernels::cpu
