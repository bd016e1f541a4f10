// Reductions on the GPU. sum_of_squares is two fixed-order stages: block b
// squares chunk b of the concatenated parts (each product of two floats is
// exact in double) and reduces it in a fixed tree to partial[b]; one block
// then sums the partials in a fixed order. No atomics, so the result has the
// same bits every run. The parts' table is uploaded like AdamW's.
#include "kernels/cuda/reduce.h"

#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "colrow/core/error.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/cuda/chunk_table.cuh"
#include "kernels/cuda/kept_buffers.h"
#include "kernels/cuda/operands.h"
#include "kernels/cuda/reductions.cuh"

namespace colrow::kernels::cuda {
namespace {

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
  __shared__ double shared[kThreads / kWarp];
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
  __shared__ double shared[kFinalThreads / kWarp];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kFinalThreads) acc += partial[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) *result = acc;
}

__global__ void divide_elements(float* x, int64_t n, float divisor) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] / divisor;
}

}  // namespace

double sum_of_squares(const std::vector<Tensor>& parts) {
  std::vector<Part> table;
  Device device;
  int64_t chunks = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = parts[i];
    if (!t.is_contiguous()) {
      throw InternalError("[reduce] sum_of_squares: part " + std::to_string(i) + " " +
                          shape_to_string(t.shape()) + " must be contiguous");
    }
    if (t.numel() == 0) continue;
    if (table.empty()) {
      device = t.device();
      if (!device.is_cuda()) {
        throw InternalError("[reduce] sum_of_squares: part " + std::to_string(i) + " lives on " +
                            device.str());
      }
    }
    require_device("sum_of_squares", device, {&t});
    table.push_back(Part{t.data(), t.numel(), chunks});
    chunks += (t.numel() + kChunk - 1) / kChunk;
  }
  if (table.empty()) return 0.0;
  if (chunks > 2147483647) throw InternalError("[reduce] sum_of_squares: too many elements");
  const Part* table_gpu = upload_kept_table(device.index, "sum_of_squares.parts", table);
  // Doubles in float tensors of twice the count (256-byte aligned storage).
  Tensor partial = kept_scratch(device.index, "sum_of_squares.partials", {2 * chunks});
  Tensor result = kept_scratch(device.index, "sum_of_squares.result", {2});
  cudaStream_t stream = colrow::cuda::compute_stream(device.index);
  double* partial_data = reinterpret_cast<double*>(partial.data());
  square_chunks<<<static_cast<unsigned int>(chunks), kThreads, 0, stream>>>(
      table_gpu, static_cast<int64_t>(table.size()), partial_data);
  COLROW_CUDA_CHECK_LAUNCH();
  sum_partials<<<1, kFinalThreads, 0, stream>>>(partial_data, chunks,
                                                reinterpret_cast<double*>(result.data()));
  COLROW_CUDA_CHECK_LAUNCH();
  const std::vector<float> bits = result.to_vector();  // waits for the kernels
  double sum = 0.0;
  std::memcpy(&sum, bits.data(), sizeof(sum));
  return sum;
}

void divide(Tensor& x, float divisor) {
  if (!x.is_contiguous()) {
    throw InternalError("[reduce] divide: x " + shape_to_string(x.shape()) + " must be contiguous");
  }
  const int64_t n = x.numel();
  if (n == 0) return;
  divide_elements<<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0,
                    colrow::cuda::compute_stream(cuda_device_of("divide", {&x}))>>>(x.data(), n,
                                                                                    divisor);
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
