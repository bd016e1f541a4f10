// CUDA twin of kernels/cpu/activation.h, where the formulas live: GELU (tanh
// or erf form), SiLU and SwiGLU, forward and backward, element-wise in fp32
// arithmetic on fp32 or bf16 elements, over contiguous tensors of one shape
// (typically [tokens, ffn_hidden/tp]); SwiGLU's also over [rows, cols] views
// with strided rows, as on the CPU.
// Backward functions overwrite their outputs, as on the CPU.
#pragma once

#include "colrow/core/tensor.h"
#include "kernels/gelu_form.h"

namespace colrow::kernels::cuda {

// x -> y, same shape.
void gelu_forward(GeluForm form, const Tensor& x, Tensor& y);
// x, dy -> dx = dy gelu'(x), same shape.
void gelu_backward(GeluForm form, const Tensor& x, const Tensor& dy, Tensor& dx);

// x -> y, same shape.
void silu_forward(const Tensor& x, Tensor& y);
// x, dy -> dx = dy silu'(x), same shape.
void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);

// gate, up -> h = silu(gate) up, same shape.
void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& h);
// gate, up, dh -> dgate = dh up silu'(gate), dup = dh silu(gate), same shape.
void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, Tensor& dgate,
                     Tensor& dup);

}  // namespace colrow::kernels::cuda
