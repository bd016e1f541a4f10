// The CUDA twin of kernels/cpu/attention.h: causal scaled-dot-product attention
// (GQA/MQA) with cuBLAS batched GEMMs on the per-head views, cut into query
// and key blocks along the causal mask, and softmax kernels. Shapes, layouts
// and formulas are documented there; only the scratch differs (dP/dS of every
// head at once).
// Every tensor lives on one GPU; work is queued on its compute stream.
#pragma once

#include <cstdint>

#include "colrow/core/tensor.h"

namespace colrow::kernels::cuda {

// q: [batch*seq, n_head*head_dim], k, v: [batch*seq, n_kv_head*head_dim]
//   -> probs: [batch, n_head, seq, seq] (contiguous, zeros where masked),
//      out: [batch*seq, n_head*head_dim]
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                       Tensor& probs, Tensor& out);

// The scratch backward needs: [batch * n_head, seq, seq] (dP, then dS, of
// every head, like probs).
Shape attention_backward_scratch_shape(int64_t batch, int64_t n_head, int64_t seq);

// dout: like out -> dq: like q, dk, dv: like k (overwritten; the query heads of
// each KV head are summed in head order). probs is left unchanged.
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& scratch);

}  // namespace colrow::kernels::cuda
