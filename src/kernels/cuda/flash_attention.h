// Fused causal attention on the GPU (FlashAttention's scheme; q, k, v, out and
// their gradients fp32 or bf16, lse fp32; computed in fp32, or for bf16 with
// tensor cores where tensor_core_attention.h takes the head_dim): the scores
// and probabilities of a tile of 64 queries against 64 keys live in registers
// and shared memory only, so the [B, NH, T, T] probabilities are never
// written. Forward keeps each row's log-sum-exp of its scaled scores;
// backward recomputes P from it. The math, shapes and layouts are
// kernels/cpu/attention.h's, with GQA/MQA and the sliding window; the plain
// kernels of kernels/cuda/attention.h stay as the reference it is tested
// against.
// Deterministic: no atomics. dK and dV of a key tile are summed in registers
// over the query heads of its KV head and the query tiles, in order; dQ is a
// kernel of its own, one block's running sum per query tile over the key
// tiles it meets, in order: no partial sums in memory (fp32; bf16 on tensor
// cores: tensor_core_attention.h, whose ordered backward sums dQ otherwise).
#pragma once

#include <cstdint>

#include "colrow/core/tensor.h"
#include "kernels/backend.h"

namespace colrow::kernels::cuda {

// Whether the fused kernels take this head_dim on `device` (up to 128, and
// the backward's shared memory must fit the device's per-block limit).
bool flash_attention_supports(int64_t head_dim, int device);

// q: [batch*seq, n_head*head_dim], k, v: [batch*seq, n_kv_head*head_dim] (2-d
// views with a contiguous last dim) -> lse: [batch, n_head, seq] (contiguous;
// log sum_j exp(scale q_i . k_j) over row i's visible keys), out: like q.
void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                             Tensor& lse, Tensor& out);

// Whether operands of `dtype` with this head_dim run on tensor cores
// (tensor_core_attention.h: bf16, head_dim a multiple of 32, sm_80 or newer);
// else on the fp32 kernels, widening bf16 as they load.
bool flash_attention_uses_tensor_cores(DType dtype, int64_t head_dim, int device);

// The fp32 scratch backward needs on `device` (flat): the rows' dO . O
// ([batch, n_head, seq]), and for `how` = kOrdered on tensor cores dQ's sums
// and turns too (tensor_core_attention_scratch_floats).
Shape flash_attention_backward_scratch_shape(const AttentionSize& size, int device,
                                             AttentionBackward how);

// q, k, v, out, lse as given to / produced by flash_attention_forward, window
// the same; dout: like out -> dq: like q, dk, dv: like k (overwritten). `how`
// applies on tensor cores (the fp32 kernels have one backward); the scratch
// is at least flash_attention_backward_scratch_shape's for the same `how`.
void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const Tensor& dout, int64_t window, Tensor& dq,
                              Tensor& dk, Tensor& dv, Tensor& scratch, AttentionBackward how);

}  // namespace colrow::kernels::cuda
