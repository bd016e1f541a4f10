// kernels/cuda/bias.h's entry points on host tensors: the same checks, then
// the same kernels (bias_kernels.cuh, column_sums.cuh) with the same grids,
// run through the warp emulation (support/warp_emulation.h). The bias GPU
// test compiled with COLROW_WARP_EMULATION calls these.
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::testing::emulated {

void add_bias(Tensor& y, const Tensor& b);
void accumulate_bias_grad(const Tensor& dy, Tensor& db);

}  // namespace colrow::testing::emulated
