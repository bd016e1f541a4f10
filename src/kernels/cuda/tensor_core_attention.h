// Fused causal attention for bf16 operands on tensor cores (sm_80 and newer),
// FlashAttention-2's scheme: the products Q K^T, P V, dO V^T, P^T dO, dS^T Q
// and dS K run as mma.sync m16n8k16 bf16 products accumulated in fp32
// registers; the softmax, its running max and sum, lse and D = dO . O stay
// fp32. P and dS
// are rounded to bf16 once, as the operands of their products (FlashAttention
// does the same), so the results are not the fp32 kernel's rounded once: the
// tests bound them against the exact values with bf16's unit roundoff.
// flash_attention_forward/backward (flash_attention.h) dispatch here for bf16
// where this takes the head_dim, after their checks; the fp32 fused kernel
// stays the reference.
// Deterministic, with no atomics: backward runs one kernel over key tiles
// (dK, dV summed in registers over the query heads and tiles, in order) and,
// for AttentionBackward::kRecompute, one over query tiles (dQ summed over the
// key tiles, in order), each recomputing S and dP; for kOrdered the first
// kernel also adds each key tile's dQ partial into fp32 sums, in key-tile
// order (tensor_core_attention_kernels.cuh).
#pragma once

#include <cstdint>

#include "colrow/core/tensor.h"
#include "kernels/backend.h"
#include "kernels/checks/attention.h"

namespace colrow::kernels::cuda {

// head_dim a multiple of 32 up to 128, a GPU of compute capability 8.0 or
// newer running code built for one, and the kernels' shared memory within
// its per-block limit.
bool tensor_core_attention_supports(int64_t head_dim, int device);

// As flash_attention_forward, with q, k, v, out bf16 (checked by the caller).
void tensor_core_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const AttentionDims& d, int64_t window, Tensor& lse,
                                   Tensor& out);

// The fp32 scratch backward needs, in floats: the row dots [batch, n_head,
// seq], and for kOrdered dQ's sums and turns.
int64_t tensor_core_attention_scratch_floats(const AttentionSize& size, AttentionBackward how);

// As flash_attention_backward; scratch: tensor_core_attention_scratch_floats.
void tensor_core_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, const Tensor& dout,
                                    const AttentionDims& d, int64_t window, Tensor& dq, Tensor& dk,
                                    Tensor& dv, float* scratch, AttentionBackward how);

}  // namespace colrow::kernels::cuda
