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

}  // namespace colrow::kernels::cpu
