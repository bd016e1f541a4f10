// kernels/cuda/reduce.h's entry points on host tensors: the same tables and
// the same kernels (reduce_kernels.cuh) with the same grids, run through the
// warp emulation (support/warp_emulation.h). The reduction GPU test compiled
// with COLROW_WARP_EMULATION calls these.
#pragma once

#include <vector>

#include "colrow/core/tensor.h"

namespace colrow::testing::emulated {

double sum_of_squares(const std::vector<Tensor>& parts);
void divide(Tensor& x, float divisor);

}  // namespace colrow::testing::emulated
