// RoPE on the GPU: the table is the CPU's (kernels/cpu/rope.cpp, in double on
// the host) copied once; the rotation runs one thread per (token, head, pair).
#include "kernels/cuda/rope.h"

#include <string>

#include "colrow/core/error.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/cpu/rope.h"

namespace colrow::kernels::cuda {
namespace {

constexpr int kThreads = 256;

void require_operands(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& y,
                      const char* what) {
  const bool ok = x.ndim() == 2 && x.is_contiguous() && y.is_contiguous() &&
                  x.shape() == y.shape() && cos.ndim() == 2 && cos.is_contiguous() &&
                  sin.shape() == cos.shape() && sin.is_contiguous() && cos.size(0) > 0 &&
                  cos.size(1) > 0 && x.size(0) % cos.size(0) == 0 &&
                  x.size(1) % (2 * cos.size(1)) == 0;
  if (!ok) {
    throw InternalError(std::string("[rope] ") + what +
                        ": need contiguous x, y [tokens, heads * head_dim] of one shape and "
                        "cos, sin [seq, head_dim / 2] with seq dividing tokens; got x " +
                        shape_to_string(x.shape()) + ", y " + shape_to_string(y.shape()) +
                        ", cos " + shape_to_string(cos.shape()) + ", sin " +
                        shape_to_string(sin.shape()));
  }
}

// y = R(sign * angle) x. Thread i owns the pair (i, i + half) of one head of
// one token and reads both before writing either, so y may alias x.
__global__ void rotate_kernel(const float* x, const float* cos, const float* sin, float* y,
                              int64_t pairs, int64_t seq, int64_t half, int64_t heads, float sign) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= pairs) return;
  const int64_t i = idx % half;
  const int64_t head = idx / half;  // token * heads + h
  const int64_t t = head / heads;
  const int64_t table = (t % seq) * half + i;
  const int64_t at = head * 2 * half + i;  // t * width + h * head_dim + i
  const float x1 = x[at], x2 = x[at + half];
  const float c = cos[table], sn = sign * sin[table];
  y[at] = x1 * c - x2 * sn;
  y[at + half] = x2 * c + x1 * sn;
}

void rotate(const Tensor& x, const Tensor& cos, const Tensor& sin, float sign, Tensor& y,
            const char* what) {
  const int64_t tokens = x.size(0), width = x.size(1);
  const int64_t seq = cos.size(0), half = cos.size(1);
  const int64_t heads = width / (2 * half);
  const int64_t pairs = tokens * heads * half;
  if (pairs == 0) return;
  const Device device = x.device();
  if (!device.is_cuda()) {
    throw InternalError(std::string("[rope] ") + what +
                        ": operands must be CUDA tensors, got one on " + device.str());
  }
  require_device(what, device, {&x, &cos, &sin, &y});
  cudaStream_t stream = colrow::cuda::compute_stream(device.index);
  rotate_kernel<<<colrow::cuda::blocks_for(pairs, kThreads), kThreads, 0, stream>>>(
      x.data(), cos.data(), sin.data(), y.data(), pairs, seq, half, heads, sign);
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_table(int64_t seq, int64_t head_dim, double rope_theta, Tensor& cos, Tensor& sin) {
  if (seq < 1 || head_dim < 2 || head_dim % 2 != 0 || !(rope_theta > 0.0)) {
    throw InternalError(
        "[rope] table needs seq >= 1, an even head_dim >= 2 and rope_theta > 0; "
        "got seq " +
        std::to_string(seq) + ", head_dim " + std::to_string(head_dim) + ", rope_theta " +
        std::to_string(rope_theta));
  }
  const Device device = cos.device();
  if (!device.is_cuda()) {
    throw InternalError("[rope] rope_table: cos and sin must be CUDA tensors, got cos on " +
                        device.str());
  }
  const Shape shape = {seq, head_dim / 2};
  Tensor host_cos = Tensor::empty(shape), host_sin = Tensor::empty(shape);
  kernels::cpu::rope_table(seq, head_dim, rope_theta, host_cos, host_sin);
  ensure_shape(cos, shape, device);
  ensure_shape(sin, shape, device);
  // Host to device: copy_from waits for the copy (the host buffers are
  // pageable and die here). The table is built once per model, not per step.
  cos.copy_from(host_cos);
  sin.copy_from(host_sin);
}

void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) {
  require_operands(x, cos, sin, y, "rope_forward");
  rotate(x, cos, sin, 1.0f, y, "rope_forward");
}

void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, Tensor& dx) {
  require_operands(dy, cos, sin, dx, "rope_backward");
  rotate(dy, cos, sin, -1.0f, dx, "rope_backward");
}

}  // namespace colrow::kernels::cuda
