// Causal scaled-dot-product attention over the heads a rank holds, for
// token-major activations (the core of Megatron's CoreAttention / HF's
// eager_attention_forward, without dropout). Sequence b occupies rows
// [b*seq, (b+1)*seq); head h occupies columns [h*head_dim, (h+1)*head_dim).
// Per (sequence, head), with scale = 1/sqrt(head_dim) and the causal mask
// (key j visible to query i iff j <= i, and i - window < j when window > 0:
// Mistral's sliding window; the rule is kernels/attention_window.h):
//   S = scale Q_h K_g^T,  P = softmax(S) row-wise (fp32, max subtracted),
//   O_h = P V_g,          g = h / (n_head / n_kv_head): the KV head of h (GQA)
//   backward: dV_g += P^T dO_h,  dP = dO_h V_g^T,  dS = P * (dP - rowsum(dP * P)),
//             dQ_h = scale dS K_g,  dK_g += scale dS^T Q_h
// The products are GEMMs on strided per-head views (nothing is copied), done
// in blocks of query rows so that the masked upper triangle is mostly skipped.
#pragma once

#include <cstdint>

#include "colrow/core/tensor.h"

namespace colrow::kernels::cpu {

// q: [batch*seq, n_head*head_dim], k, v: [batch*seq, n_kv_head*head_dim] (2-d
// views with a contiguous last dim), n_kv_head dividing n_head
// window: 0 (fully causal) or the sliding window, > 0
//   -> probs: [batch, n_head, seq, seq] (contiguous; P with zeros where masked,
//             kept for backward), out: [batch*seq, n_head*head_dim]
// batch, n_head and seq are read from probs; head_dim from q and n_head.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                       Tensor& probs, Tensor& out);

// The scratch backward needs: [threads, seq, seq], one dS slab per (sequence,
// head) in flight; a larger first dimension takes more heads at a time (the
// bits do not change).
Shape attention_backward_scratch_shape(int64_t seq);

// q, k, v, probs as given to / produced by attention_forward; dout: like out
//   -> dq: like q, dk, dv: like k (overwritten: dk and dv sum the query heads
//      that share each KV head). probs is left unchanged. The window needs no
//      argument: its masked keys have P = 0, so their dS is 0 too.
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& scratch);

}  // namespace colrow::kernels::cpu
