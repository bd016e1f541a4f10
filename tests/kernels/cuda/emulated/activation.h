// kernels/cuda/activation.h's entry points on host tensors: the same checks,
// then the same kernels (activation_kernels.cuh) with the same grids, run
// through the warp emulation (support/warp_emulation.h). The activation GPU
// test compiled with COLROW_WARP_EMULATION calls these.
#pragma once

#include "colrow/core/tensor.h"
#include "kernels/gelu_form.h"

namespace colrow::testing::emulated {

void gelu_forward(kernels::GeluForm form, const Tensor& x, Tensor& y);
void gelu_backward(kernels::GeluForm form, const Tensor& x, const Tensor& dy, Tensor& dx);
void silu_forward(const Tensor& x, Tensor& y);
void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);
void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& h);
void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, Tensor& dgate,
                     Tensor& dup);

}  // namespace colrow::testing::emulated
