// kernels/cuda/norm.h's entry points on host tensors: the same checks, then
// the same kernels (norm_kernels.cuh, column_sums.cuh) with the same grids, run through the warp
// emulation (support/warp_emulation.h). The norm GPU test compiled with COLROW_WARP_EMULATION calls
// these.
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::testing::emulated {

void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd, const Tensor* residual = nullptr,
                        Tensor* sum = nullptr);
void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                         Tensor& dbeta, const Tensor* dresidual = nullptr);
void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd,
                      const Tensor* residual = nullptr, Tensor* sum = nullptr);
void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                       Tensor& dx, Tensor& dweight, const Tensor* dresidual = nullptr);

}  // namespace colrow::testing::emulated
