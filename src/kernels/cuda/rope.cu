// Launches of RoPE on the GPU (rope.h): the table is the CPU's
// (kernels/cpu/rope.cpp, in double on the host) copied once; the rotation
// kernel is in rope_kernels.cuh.
#include "kernels/cuda/rope.h"

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/rope.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/operands.h"
#include "kernels/cuda/rope_kernels.cuh"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {
namespace {

using rope_kernels::kThreads;

void rotate(const Tensor& x, const Tensor& cos, const Tensor& sin, float sign, Tensor& y,
            const char* what) {
  const rope_kernels::Rotation r = rope_kernels::rotation_of(x, cos);
  if (r.pairs == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(cuda_device_of(what, {&x, &cos, &sin, &y}));
  with_element_type(what, {&x, &y}, [&](auto e) {
    using E = decltype(e);
    rope_kernels::rotate_kernel<E>
        <<<colrow::cuda::blocks_for(r.pairs, kThreads), kThreads, 0, stream>>>(
            elements<E>(x), x.row_stride(), cos.data(), sin.data(), elements<E>(y), y.row_stride(),
            r.pairs, r.seq, r.half, r.heads, sign);
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
