// kernels/cuda/adamw.h's entry point on host tensors: the same table and
// the same kernel (adamw_kernels.cuh) with the same grid, run through the
// warp emulation (support/warp_emulation.h). The AdamW GPU test compiled
// with COLROW_WARP_EMULATION calls it.
#pragma once

#include <vector>

#include "kernels/backend.h"

namespace colrow::testing::emulated {

void adamw_update(const std::vector<kernels::AdamWSegment>& segments,
                  const kernels::AdamWStep& step);

}  // namespace colrow::testing::emulated
