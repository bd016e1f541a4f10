// kernels/cuda/rope.h's entry points on host tensors: the same checks, then
// the same kernel (rope_kernels.cuh) with the same grid, run through the warp
// emulation (support/warp_emulation.h). The RoPE GPU test compiled with
// COLROW_WARP_EMULATION calls these.
#pragma once

#include <cstdint>
#include <vector>

#include "colrow/core/tensor.h"

namespace colrow::testing::emulated {

void rope_table(int64_t seq, const std::vector<double>& inv_freq, Tensor& cos, Tensor& sin);
void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y);
void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, Tensor& dx);

}  // namespace colrow::testing::emulated
