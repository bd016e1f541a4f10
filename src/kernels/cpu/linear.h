// A linear layer's GEMM and its bias work as one operation, so that a backend
// can fuse them (cuBLASLt's epilogues on a GPU; kernels/cuda/linear.h). The
// CPU runs the GEMM and then the bias kernel: the same numbers as calling
// them one after the other.
//   x: [tokens, in], w: [out, in] (nn.Linear's layout), b: [out]
//   y: [tokens, out], dy: like y, dw: like w, db: like b
// 2-d operands may be strided views with a contiguous last dim.
// Mixed precision: forward's x, w, b and y may all be bf16, and the weight
// gradients' dy and x too (dw and db stay fp32). Then the sums are fp32 and
// each output is rounded once, after the bias: what cuBLASLt's epilogues do.
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::kernels::cpu {

// y = x w^T + b
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);

// dw += dy^T x and db += the column sums of dy (both accumulate, like every
// parameter gradient).
void linear_weight_grads(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db);

// The GELU MLP's first projection and its activation in one operation, as
// cuBLASLt's GELU epilogues fuse them (GELU_AUX_BIAS forward, DGELU backward;
// tanh form only, which is cuBLASLt's; activation.h has the formulas):
//   pre_activation = x w^T (+ b, when b is given), y = gelu_tanh(pre_activation)
// and the second projection's input gradient through the activation:
//   dx = gelu_tanh'(pre_activation) * (dy w)
//   (dy: [tokens, out], w: [out, in], pre_activation and dx: [tokens, in]).
// The CPU runs the pieces one after the other (linear_forward or gemm, then
// gelu_forward; gemm, then gelu_backward in place): the same bits as calling
// them itself. A GPU's fused bf16 results differ from that by the rounding of
// the product before the activation, which the epilogue skips.
void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& pre_activation,
                         Tensor& y);
void gelu_input_grad(const Tensor& dy, const Tensor& w, const Tensor& pre_activation, Tensor& dx);

}  // namespace colrow::kernels::cpu
