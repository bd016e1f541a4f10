// The RoPE rotation on the GPU (rope.h; launched by rope.cu): one thread
// per (token, head, pair), with the CPU's table (kernels/cpu/rope.cpp). x and
// y are fp32 or bf16 (E, kernels/elements.h), bf16 read natively and each
// output rounded once; the table stays fp32. Rows may be strided (ldx, ldy: a
// block of a wider tensor's columns, as attention's fused qkv). A host
// compiler takes this header too: tests/kernels/cuda/rope_test runs the
// kernel on the CPU through the warp emulation as well as on a GPU.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "colrow/core/bfloat16.h"
#include "colrow/core/tensor.h"
#include "core/cuda/cuda_context.h"

namespace colrow::kernels::cuda::rope_kernels {

constexpr int kThreads = 256;

// y = R(sign * angle) x. Thread i owns the pair (i, i + half) of one head of
// one token and reads both before writing either, so y may alias x.
template <typename E>
__global__ void rotate_kernel(const E* x, int64_t ldx, const float* cos, const float* sin, E* y,
                              int64_t ldy, int64_t pairs, int64_t seq, int64_t half, int64_t heads,
                              float sign) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= pairs) return;
  const int64_t i = idx % half;
  const int64_t head = idx / half;  // token * heads + h
  const int64_t t = head / heads;
  const int64_t table = (t % seq) * half + i;
  const int64_t column = (head - t * heads) * 2 * half + i;  // h * head_dim + i
  const int64_t in = t * ldx + column, at = t * ldy + column;
  const float x1 = widen(x[in]), x2 = widen(x[in + half]);
  const float c = cos[table], sn = sign * sin[table];
  // As the CPU spells it: one product rounded (__fmul_rn: never contracted),
  // the other fused into the add. Left to ptxas, either product may be the
  // fused one, and a rotation that nearly cancels then rounds another bf16.
  y[at] = narrow<E>(fmaf(x1, c, -__fmul_rn(x2, sn)));
  y[at + half] = narrow<E>(fmaf(x2, c, __fmul_rn(x1, sn)));
}

// The rotation of x [tokens, heads * 2 half] by a table [seq, half]: one
// thread per pair.
struct Rotation {
  int64_t pairs, seq, half, heads;
};
inline Rotation rotation_of(const Tensor& x, const Tensor& cos) {
  const int64_t seq = cos.size(0), half = cos.size(1);
  const int64_t heads = x.size(1) / (2 * half);
  return {x.size(0) * heads * half, seq, half, heads};
}

}  // namespace colrow::kernels::cuda::rope_kernels
