// The residual-add kernels on the GPU (residual.h; launched by residual.cu),
// one thread per element (memory-bound: one pass each), on fp32 or bf16
// activations (E, kernels/elements.h): bf16 read natively, each sum rounded
// once. A host compiler takes this header too: tests/kernels/cuda/norm_test
// runs them on the CPU through the warp emulation as well as on a GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_context.h"

namespace colrow::kernels::cuda::residual_kernels {

constexpr int kThreads = 256;

template <typename E>
__global__ void add_kernel(const E* a, const E* b, E* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = narrow<E>(widen(a[i]) + widen(b[i]));
}

template <typename E>
__global__ void add_into_kernel(E* out, const E* a, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = narrow<E>(widen(out[i]) + widen(a[i]));
}

}  // namespace colrow::kernels::cuda::residual_kernels
