// Launches of the reductions on the GPU (reduce.h); the kernels, and the
// order they sum in, are in reduce_kernels.cuh.
#include "kernels/cuda/reduce.h"

#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "colrow/core/error.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/cuda/kept_buffers.h"
#include "kernels/cuda/operands.h"
#include "kernels/cuda/reduce_kernels.cuh"

namespace colrow::kernels::cuda {
namespace {

using reduce_kernels::kFinalThreads;
using reduce_kernels::kThreads;

}  // namespace

double sum_of_squares(const std::vector<Tensor>& parts) {
  const reduce_kernels::PartTable table = reduce_kernels::part_table(parts);
  if (table.rows.empty()) return 0.0;
  if (!table.device.is_cuda()) {
    throw InternalError("[reduce] sum_of_squares: part " + std::to_string(table.first) +
                        " lives on " + table.device.str());
  }
  const Device device = table.device;
  const int64_t chunks = table.chunks;
  const reduce_kernels::Part* table_gpu =
      upload_kept_table(device.index, "sum_of_squares.parts", table.rows);
  // Doubles in float tensors of twice the count (256-byte aligned storage).
  Tensor partial = kept_scratch(device.index, "sum_of_squares.partials", {2 * chunks});
  Tensor result = kept_scratch(device.index, "sum_of_squares.result", {2});
  cudaStream_t stream = colrow::cuda::compute_stream(device.index);
  double* partial_data = reinterpret_cast<double*>(partial.data());
  reduce_kernels::square_chunks<<<static_cast<unsigned int>(chunks), kThreads, 0, stream>>>(
      table_gpu, static_cast<int64_t>(table.rows.size()), partial_data);
  COLROW_CUDA_CHECK_LAUNCH();
  reduce_kernels::sum_partials<<<1, kFinalThreads, 0, stream>>>(
      partial_data, chunks, reinterpret_cast<double*>(result.data()));
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
  reduce_kernels::divide_elements<<<colrow::cuda::blocks_for(n, kThreads), kThreads, 0,
                                    colrow::cuda::compute_stream(cuda_device_of("divide", {&x}))>>>(
      x.data(), n, divisor);
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
