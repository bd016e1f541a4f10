// kernels/cuda/residual.h's entry points on host tensors: the same checks,
// then the same kernels (residual_kernels.cuh) with the same grids, run
// through the warp emulation (support/warp_emulation.h). The norm GPU test
// compiled with COLROW_WARP_EMULATION compares its fused add with these.
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::testing::emulated {

void add(const Tensor& a, const Tensor& b, Tensor& out);
void add_into(Tensor& out, const Tensor& a);

}  // namespace colrow::testing::emulated
