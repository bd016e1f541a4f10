// CUDA twin of kernels/cpu/norm.h, where the formulas, shapes and precision
// are documented: LayerNorm and RMSNorm forward and backward, row statistics in
// double (variance in a second pass about the mean), fp32 mean/rstd kept for the
// backward, dx overwritten, parameter gradients accumulated (+=) and
// deterministic: the same inputs give the same bits on every run.
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::kernels::cuda {

// x: [tokens, d], gamma, beta: [d] -> y: [tokens, d], mean, rstd: [tokens].
// With residual: the input is x + residual, written to sum (kernels/cpu/norm.h).
void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd, const Tensor* residual = nullptr,
                        Tensor* sum = nullptr);
// x, dy: [tokens, d], gamma: [d], mean, rstd: [tokens] -> dx: [tokens, d];
// dgamma, dbeta: [d] accumulated; with dresidual, dx = dresidual + the norm's.
void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                         Tensor& dbeta, const Tensor* dresidual = nullptr);

// x: [tokens, d], weight: [d] -> y: [tokens, d], rstd: [tokens].
void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd,
                      const Tensor* residual = nullptr, Tensor* sum = nullptr);
// x, dy: [tokens, d], weight: [d], rstd: [tokens] -> dx: [tokens, d]; dweight: [d] accumulated.
void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                       Tensor& dx, Tensor& dweight, const Tensor* dresidual = nullptr);

}  // namespace colrow::kernels::cuda
