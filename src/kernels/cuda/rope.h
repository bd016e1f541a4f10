// CUDA twin of kernels/cpu/rope.h, where the formulas (Hugging Face LLaMA's
// rotate-half RoPE) and the table's precision are documented.
//   x, y, dy, dx: [tokens, n_heads * head_dim], row t at position t % seq
//   cos, sin: [seq, head_dim / 2]
#pragma once

#include <cstdint>

#include "colrow/core/tensor.h"

namespace colrow::kernels::cuda {

// Fills the caller's GPU tensors cos, sin: [seq, head_dim / 2] with the CPU's
// table (computed in double on the host, rounded once to fp32, then copied).
// Reshaped on their GPU if they have another shape, as ensure_shape does.
void rope_table(int64_t seq, const std::vector<double>& inv_freq, Tensor& cos, Tensor& sin);

// x: [tokens, n_heads * head_dim] -> y: same shape, tokens a multiple of
// seq = cos.size(0), head_dim = 2 * cos.size(1). y may be x (in place).
void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y);
// dy -> dx = R(-angle) dy, same shapes as rope_forward; dx may be dy.
void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, Tensor& dx);

}  // namespace colrow::kernels::cuda
