// dtype conversion on the GPU, one thread per element (memory-bound: one
// pass). cuda_bf16.h's __float2bfloat16_rn rounds like core/bfloat16.h except
// for NaN payloads (it returns the canonical NaN); colrow's own rounding runs
// here instead, so the CPU and the GPU give the same bits for every input.
#include <cuda_runtime.h>

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/convert.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/operands.h"
#include "kernels/mixed_precision.h"

namespace colrow::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ uint16_t round_to_bf16(float f) {
  uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

__global__ void to_bf16_kernel(const float* x, uint16_t* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = round_to_bf16(x[i]);
}

__global__ void to_f32_kernel(const uint16_t* x, float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __uint_as_float(static_cast<uint32_t>(x[i]) << 16);
}

}  // namespace

void convert(const Tensor& src, Tensor& dst) {
  check_convert(src, dst);
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.dtype() == dst.dtype()) {
    dst.copy_from(src);
    return;
  }
  cudaStream_t stream = colrow::cuda::compute_stream(cuda_device_of("convert", {&src, &dst}));
  const unsigned blocks = colrow::cuda::blocks_for(n, kThreads);
  if (src.dtype() == DType::kF32) {
    to_bf16_kernel<<<blocks, kThreads, 0, stream>>>(src.data(), dst.bf16_data(), n);
  } else {
    to_f32_kernel<<<blocks, kThreads, 0, stream>>>(src.bf16_data(), dst.data(), n);
  }
  COLROW_CUDA_CHECK_LAUNCH();
}

Tensor as_f32(const Tensor& t) {
  return widened(t, [](const Tensor& src, Tensor& dst) { convert(src, dst); });
}

void store_converted(const Tensor& src, Tensor& dst) {
  store_rounded(src, dst, [](const Tensor& from, Tensor& to) { convert(from, to); });
}

}  // namespace colrow::kernels::cuda
