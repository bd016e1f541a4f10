// kernels/cuda/flash_attention.h's entry points on host tensors: the same
// checks, then the same kernels (flash_attention_kernels.cuh, and bf16 at
// the tensor cores' head dims through tensor_core_attention.h here) with the
// same grids and shared memory, run through the warp emulation
// (support/warp_emulation.h). The fused attention GPU test compiled with
// COLROW_WARP_EMULATION calls these.
#pragma once

#include <cstdint>

#include "colrow/core/tensor.h"
#include "kernels/backend.h"

namespace colrow::testing::emulated {

// Head dims 1 .. 128: the host has whatever shared memory a launch asks for.
bool flash_attention_supports(int64_t head_dim, int device);

void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                             Tensor& lse, Tensor& out);

bool flash_attention_uses_tensor_cores(DType dtype, int64_t head_dim, int device);

Shape flash_attention_backward_scratch_shape(const kernels::AttentionSize& size, int device,
                                             kernels::AttentionBackward how);

void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const Tensor& dout, int64_t window, Tensor& dq,
                              Tensor& dk, Tensor& dv, Tensor& scratch,
                              kernels::AttentionBackward how);

}  // namespace colrow::testing::emulated
