// kernels/cuda/tensor_core_attention.h's entry points on host tensors: the
// same kernels (tensor_core_attention_kernels.cuh) with the same grids and
// shared memory, run through the warp emulation (support/warp_emulation.h).
// The emulated fused attention (flash_attention.h here) dispatches bf16 to
// them as the GPU's does.
#pragma once

#include <cstdint>

#include "colrow/core/tensor.h"
#include "kernels/backend.h"
#include "kernels/checks/attention.h"

namespace colrow::testing::emulated {

// The head dims the kernels are built for, as on a GPU with bf16 tensor
// cores and the shared memory they ask for (sm_90: every one).
bool tensor_core_attention_supports(int64_t head_dim, int device);

void tensor_core_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const kernels::AttentionDims& d, int64_t window, Tensor& lse,
                                   Tensor& out);

int64_t tensor_core_attention_scratch_floats(const kernels::AttentionSize& size,
                                             kernels::AttentionBackward how);

void tensor_core_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, const Tensor& dout,
                                    const kernels::AttentionDims& d, int64_t window, Tensor& dq,
                                    Tensor& dk, Tensor& dv, float* scratch,
                                    kernels::AttentionBackward how);

}  // namespace colrow::testing::emulated
