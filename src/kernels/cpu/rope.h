// Rotary position embedding (RoPE) exactly as Hugging Face LLaMA applies it
// (apply_rotary_pos_emb with rotate_half): for each head's vector x of size
// head_dim, half = head_dim / 2 and position p,
//   inv_freq[i] = rope_theta^(-2i / head_dim), or a scaling of it
//                 (colrow/nn/rope_scaling.h),  angle[i] = p * inv_freq[i]  (i < half)
//   cos, sin duplicated over both halves:  y = x * cos + rotate_half(x) * sin,
//   rotate_half(x) = concat(-x[half:], x[:half]), so for i < half
//     y[i]        = x[i] cos[i] - x[i + half] sin[i]
//     y[i + half] = x[i + half] cos[i] + x[i] sin[i]
// The backward is the transpose of that rotation, i.e. the rotation by -angle.
// Activations are token-major: x: [batch * seq, n_heads * head_dim], and row t
// has position t % seq (positions restart at 0 in every sequence).
#pragma once

#include <cstdint>
#include <vector>

#include "colrow/core/tensor.h"

namespace colrow::kernels::cpu {

// inv_freq: head_dim / 2 values -> cos, sin: [seq, head_dim / 2], the cosine
// and sine of angle[p][i] = p inv_freq[i]. The angle
// and its cosine and sine are computed in double and rounded once to fp32
// (HF computes the angle in fp32, which at position 4096 is off by ~2e-4 rad;
// the formula is the same, the table is more accurate).
void rope_table(int64_t seq, const std::vector<double>& inv_freq, Tensor& cos, Tensor& sin);

// x: [tokens, n_heads * head_dim] -> y: same shape, tokens a multiple of
// seq = cos.size(0), head_dim = 2 * cos.size(1). y may be x (in place).
void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y);
// dy -> dx = R(-angle) dy, same shapes as rope_forward; dx may be dy.
void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, Tensor& dx);

}  // namespace colrow::kernels::cpu
