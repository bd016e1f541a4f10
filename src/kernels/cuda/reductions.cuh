// Warp and block reductions shared by the CUDA kernels, in a fixed butterfly
// order (xor shuffles): at each step lanes i and i ^ offset combine the same
// two values, so every lane ends with the same bits, run after run. Sums and
// maxima of softmax rows, norms, the cross-entropy and the gradient norm all
// reduce this way.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace colrow::kernels::cuda {

constexpr int kWarp = 32;

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Over the 32 lanes of a warp (lane = threadIdx.x % 32); every lane gets the result.
template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T x, Op op) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T x) {
  return warp_reduce(x, SumOp{});
}
__device__ __forceinline__ float warp_max(float x) {
  return warp_reduce(x, MaxOp{});
}

// Over a 1-d block of whole warps; every thread gets the result. Every thread
// of the block must call it. shared: [blockDim.x / 32], free again on return.
template <typename T, typename Op>
__device__ T block_reduce(T x, T* shared, Op op) {
  x = warp_reduce(x, op);
  if (threadIdx.x % kWarp == 0) shared[threadIdx.x / kWarp] = x;
  __syncthreads();
  T result = shared[0];
  for (unsigned int w = 1; w < blockDim.x / kWarp; ++w) result = op(result, shared[w]);
  __syncthreads();
  return result;
}

template <typename T>
__device__ T block_sum(T x, T* shared) {
  return block_reduce(x, shared, SumOp{});
}
__device__ inline float block_max(float x, float* shared) {
  return block_reduce(x, shared, MaxOp{});
}

}  // namespace colrow::kernels::cuda
