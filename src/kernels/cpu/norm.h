// LayerNorm (torch.nn.LayerNorm over the last dim) and RMSNorm (Hugging Face's
// LlamaRMSNorm), forward and backward, for token-major activations.
//   x, y, dy, dx: [tokens, d] (last dim contiguous; rows may be strided)
//   gamma, beta, weight and their gradients: [d]; mean, rstd: [tokens]
//   LayerNorm: mean = sum_j x_j / d, var = sum_j (x_j - mean)^2 / d,
//              rstd = 1 / sqrt(var + eps), y = (x - mean) rstd gamma + beta
//   RMSNorm:   rstd = 1 / sqrt(sum_j x_j^2 / d + eps), y = x rstd weight
// Row statistics are accumulated in double (the variance in a second pass about
// the mean), so they are accurate to fp32 rounding for any d and any offset.
// Backward overwrites dx and accumulates the parameter gradients, like every
// parameter gradient in colrow.
// The residual add around a norm can ride in the same pass (llm.c's fused
// residual forward, Apex's FusedAddLayerNorm):
//   forward with `residual`: the norm's input is x + residual, rounded once
//     to their dtype and written to `sum` (the residual stream's next value,
//     which backward then takes as its x);
//   backward with `dresidual`: dx = dresidual + the norm's input gradient,
//     each rounded once to their dtype.
// Both give the bits of the separate add (kernels/cpu/residual.h) and norm,
// in either dtype: backward adds the residual's gradient in a second pass
// over the row it just wrote (in L1), so that no compiler contracts the add
// into the norm's last multiply; the CUDA kernels add with __fadd_rn.
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::kernels::cpu {

// Writes y and keeps mean and rstd (fp32) for the backward.
void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd, const Tensor* residual = nullptr,
                        Tensor* sum = nullptr);
// With xhat = (x - mean) rstd and g = dy gamma:
//   dx = rstd (g - mean_j(g) - xhat mean_j(g xhat))
//   dgamma += sum_t dy xhat,  dbeta += sum_t dy
void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                         Tensor& dbeta, const Tensor* dresidual = nullptr);

// Writes y and keeps rstd (fp32) for the backward.
void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd,
                      const Tensor* residual = nullptr, Tensor* sum = nullptr);
// With xhat = x rstd and g = dy weight:
//   dx = rstd (g - xhat mean_j(g xhat)),  dweight += sum_t dy xhat
void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                       Tensor& dx, Tensor& dweight, const Tensor* dresidual = nullptr);

}  // namespace colrow::kernels::cpu
