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
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::kernels::cpu {

// Writes y and keeps mean and rstd (fp32) for the backward.
void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd);
// With xhat = (x - mean) rstd and g = dy gamma:
//   dx = rstd (g - mean_j(g) - xhat mean_j(g xhat))
//   dgamma += sum_t dy xhat,  dbeta += sum_t dy
void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                         Tensor& dbeta);

// Writes y and keeps rstd (fp32) for the backward.
void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd);
// With xhat = x rstd and g = dy weight:
//   dx = rstd (g - xhat mean_j(g xhat)),  dweight += sum_t dy xhat
void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                       Tensor& dx, Tensor& dweight);

}  // namespace colrow::kernels::cpu
