// RoPE on the GPU: the table is the CPU's (kernels/cpu/rope.cpp, in double on
// the host) copied once; the rotation runs one thread per (token, head, pair).
// x and y are fp32 or bf16 (E, kernels/elements.h), bf16 read natively and
// each output rounded once; the table stays fp32. Rows may be strided (ldx,
// ldy: a block of a wider tensor's columns, as attention's fused qkv).
#include "kernels/cuda/rope.h"

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/rope.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/operands.h"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {
namespace {

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

void rotate(const Tensor& x, const Tensor& cos, const Tensor& sin, float sign, Tensor& y,
            const char* what) {
  const int64_t tokens = x.size(0), width = x.size(1);
  const int64_t seq = cos.size(0), half = cos.size(1);
  const int64_t heads = width / (2 * half);
  const int64_t pairs = tokens * heads * half;
  if (pairs == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(cuda_device_of(what, {&x, &cos, &sin, &y}));
  with_element_type(what, {&x, &y}, [&](auto e) {
    using E = decltype(e);
    rotate_kernel<E><<<colrow::cuda::blocks_for(pairs, kThreads), kThreads, 0, stream>>>(
        elements<E>(x), x.row_stride(), cos.data(), sin.data(), elements<E>(y), y.row_stride(),
        pairs, seq, half, heads, sign);
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_table(int64_t seq, const std::vector<double>& inv_freq, Tensor& cos, Tensor& sin) {
  check_rope_table(seq, inv_freq);
  // sin follows cos onto its GPU (ensure_shape).
  const Device device = Device::cuda(cuda_device_of("rope_table", {&cos}));
  const Shape shape = {seq, static_cast<int64_t>(inv_freq.size())};
  Tensor host_cos = Tensor::empty(shape), host_sin = Tensor::empty(shape);
  kernels::cpu::rope_table(seq, inv_freq, host_cos, host_sin);
  ensure_shape(cos, shape, device);
  ensure_shape(sin, shape, device);
  // Host to device: copy_from waits for the copy (the host buffers are
  // pageable and die here). The table is built once per model, not per step.
  cos.copy_from(host_cos);
  sin.copy_from(host_sin);
}

void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) {
  check_rope(x, cos, sin, y, "rope_forward");
  rotate(x, cos, sin, 1.0f, y, "rope_forward");
}

void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, Tensor& dx) {
  check_rope(dy, cos, sin, dx, "rope_backward");
  rotate(dy, cos, sin, -1.0f, dx, "rope_backward");
}

}  // namespace colrow::kernels::cuda
