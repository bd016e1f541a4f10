// The reduction kernels on the GPU (reduce.h; launched by reduce.cu).
// sum_of_squares is two fixed-order stages: block b
// squares chunk b of the concatenated parts (each product of two floats is
// exact in double) and reduces it in a fixed tree to partial[b]; one block
// then sums the partials in a fixed order. No atomics, so the result has the
// same bits every run. The parts' table is uploaded like AdamW's.
// A host compiler takes this header too: tests/kernels/cuda/reduce_test runs
// these kernels on the CPU through the warp emulation as well as on a GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"
#include "core/cuda/cuda_context.h"
#include "kernels/cuda/chunk_table.cuh"
#include "kernels/cuda/reductions.cuh"
#include "kernels/cuda/shared_memory.cuh"

namespace colrow::kernels::cuda::reduce_kernels {

constexpr int kThreads = 256;
constexpr int kPerThread = 16;
constexpr int64_t kChunk = int64_t{kThreads} * kPerThread;
constexpr int kFinalThreads = 1024;

struct Part {
  const float* data;
  int64_t count;
  int64_t first_chunk;
};

__global__ void square_chunks(const Part* table, int64_t n_parts, double* partial) {
  COLROW_BLOCK_SHARED(double, shared, [kThreads / kWarp]);
  const int64_t chunk = blockIdx.x;
  const Part part = row_of_chunk(table, n_parts, chunk);
  const int64_t begin = (chunk - part.first_chunk) * kChunk;
  double acc = 0.0;
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = begin + int64_t{k} * kThreads + threadIdx.x;
    if (i >= part.count) break;
    const double x = part.data[i];
    acc += x * x;
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partial[chunk] = acc;
}

__global__ void sum_partials(const double* partial, int64_t n, double* result) {
  COLROW_BLOCK_SHARED(double, shared, [kFinalThreads / kWarp]);
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kFinalThreads) acc += partial[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) *result = acc;
}

__global__ void divide_elements(float* x, int64_t n, float divisor) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] / divisor;
}

using PartTable = ChunkTable<Part>;

// sum_of_squares' table: a row per non-empty part, in order; each part
// contiguous and on the first one's device.
inline PartTable part_table(const std::vector<Tensor>& parts) {
  PartTable table;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = parts[i];
    if (!t.is_contiguous()) {
      throw InternalError("[reduce] sum_of_squares: part " + std::to_string(i) + " " +
                          shape_to_string(t.shape()) + " must be contiguous");
    }
    if (t.numel() == 0) continue;
    table.append(Part{t.data(), t.numel(), 0}, i, t.device(), t.numel(), kChunk);
    require_device("sum_of_squares", table.device, {&t});
  }
  table.check_fits("[reduce] sum_of_squares");
  return table;
}

}  // namespace colrow::kernels::cuda::reduce_kernels
