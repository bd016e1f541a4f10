// Element-wise activations and their derivatives, over contiguous tensors of
// equal shape (typically [tokens, ffn_hidden/tp]); SwiGLU's operands may also
// be [rows, cols] views with strided rows (gate and up as column blocks of
// the fused gate_up projection's output, dgate and dup of its gradient).
//   GELU, tanh form (GPT-2's "gelu_new"):
//     gelu(x)  = x/2 (1 + tanh(k (x + c x^3))),  k = sqrt(2/pi), c = 0.044715
//     gelu'(x) = (1 + t)/2 + x/2 (1 - t^2) k (1 + 3 c x^2),  t = tanh(k (x + c x^3))
//   GELU, exact form (HF's "gelu"), Phi the standard normal CDF:
//     gelu(x)  = x Phi(x) = x/2 (1 + erf(x / sqrt 2))
//     gelu'(x) = Phi(x) + x phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//   SiLU: silu(x) = x s(x), s = sigmoid;  silu'(x) = s(x) (1 + x (1 - s(x)))
//   SwiGLU (LLaMA's MLP): h = silu(gate) * up
// Backward functions overwrite their outputs (dx = dy * f'(x)); they are fed
// fresh buffers, and the caller owns any accumulation.
#pragma once

#include "colrow/core/tensor.h"
#include "kernels/gelu_form.h"

namespace colrow::kernels::cpu {

void gelu_forward(GeluForm form, const Tensor& x, Tensor& y);
void gelu_backward(GeluForm form, const Tensor& x, const Tensor& dy, Tensor& dx);

void silu_forward(const Tensor& x, Tensor& y);
void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);

void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& h);
void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, Tensor& dgate,
                     Tensor& dup);

}  // namespace colrow::kernels::cpu
