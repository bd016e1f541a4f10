// Bias add and bias-gradient column sums on the GPU. The gradient sums over
// tokens without atomics, so its bits do not depend on block scheduling:
// stage 1 gives each block 32 features x one chunk of tokens and
// writes one partial sum per (chunk, feature); stage 2 adds the partials of
// each feature in chunk order and accumulates into db. The order depends only
// on the shape. Sums are fp32, as in kernels/cpu/bias.cpp.
#include "kernels/cuda/bias.h"

#include <string>

#include "colrow/core/error.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"

namespace colrow::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kColumns = 32;         // features per stage-1 block: one warp-wide coalesced row read
constexpr int kRowThreads = 8;       // threads down the tokens in a stage-1 block
constexpr int64_t kChunkRows = 128;  // tokens per stage-1 block, unless that makes too many
constexpr int64_t kMaxChunks = 65535;  // gridDim.y's limit

void require_rows_of(const Tensor& y, const Tensor& b, const char* what) {
  if (y.ndim() != 2 || y.stride(1) != 1 || b.ndim() != 1 || !b.is_contiguous() ||
      b.size(0) != y.size(1)) {
    throw InternalError(std::string("[bias] ") + what + ": activations " +
                        shape_to_string(y.shape()) + " and bias " + shape_to_string(b.shape()) +
                        " do not match");
  }
}

// The GPU both operands live on; InternalError for a host tensor or two GPUs.
int device_of(const char* what, const Tensor& y, const Tensor& b) {
  if (!y.device().is_cuda()) {
    throw InternalError(std::string("[bias] ") + what + ": operands must be CUDA tensors, got " +
                        "one on " + y.device().str());
  }
  require_device(what, y.device(), {&y, &b});
  return y.device().index;
}

__global__ void add_bias_kernel(float* y, const float* b, int64_t tokens, int64_t features,
                                int64_t ld) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * features) return;
  const int64_t j = i % features;
  y[(i / features) * ld + j] += b[j];
}

// Tokens per stage-1 chunk: a function of the shape only, so is the sum order.
int64_t chunk_rows_for(int64_t tokens) {
  const int64_t spread = (tokens + kMaxChunks - 1) / kMaxChunks;
  return spread > kChunkRows ? spread : kChunkRows;
}

// Stage 1. Block (x: feature block, y: token chunk), threads (kColumns, kRowThreads).
// Thread (c, r) sums tokens chunk_start + r, + r + kRowThreads, ... of feature
// j in that order; the kRowThreads sums are then added in r order.
__global__ void bias_grad_partials(const float* dy, int64_t tokens, int64_t features, int64_t ld,
                                   int64_t chunk_rows, float* partial) {
  __shared__ float sums[kRowThreads][kColumns];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t t1 = t0 + chunk_rows < tokens ? t0 + chunk_rows : tokens;
  float sum = 0.0f;
  if (j < features) {
    for (int64_t t = t0 + threadIdx.y; t < t1; t += kRowThreads) sum += dy[t * ld + j];
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && j < features) {
    float total = sums[0][threadIdx.x];
    for (int r = 1; r < kRowThreads; ++r) total += sums[r][threadIdx.x];
    partial[static_cast<int64_t>(blockIdx.y) * features + j] = total;
  }
}

// Stage 2: db[j] += the chunks' partial sums of feature j, in chunk order.
__global__ void bias_grad_finish(const float* partial, int64_t chunks, int64_t features,
                                 float* db) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= features) return;
  float sum = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) sum += partial[c * features + j];
  db[j] += sum;
}

}  // namespace

void add_bias(Tensor& y, const Tensor& b) {
  require_rows_of(y, b, "add_bias");
  const int64_t tokens = y.size(0), features = y.size(1);
  if (tokens * features == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(device_of("add_bias", y, b));
  add_bias_kernel<<<colrow::cuda::blocks_for(tokens * features, kThreads), kThreads, 0, stream>>>(
      y.data(), b.data(), tokens, features, y.row_stride());
  COLROW_CUDA_CHECK_LAUNCH();
}

void accumulate_bias_grad(const Tensor& dy, Tensor& db) {
  require_rows_of(dy, db, "accumulate_bias_grad");
  const int64_t tokens = dy.size(0), features = dy.size(1);
  if (tokens * features == 0) return;  // db += 0
  const int device = device_of("accumulate_bias_grad", dy, db);
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  const int64_t chunk_rows = chunk_rows_for(tokens);
  const int64_t chunks = (tokens + chunk_rows - 1) / chunk_rows;
  // From the caching allocator; freed when this returns, reused only by work
  // queued after these kernels on the same stream.
  Tensor partial = Tensor::empty({chunks, features}, Device::cuda(device));
  const dim3 grid(colrow::cuda::blocks_for(features, kColumns), static_cast<unsigned int>(chunks));
  bias_grad_partials<<<grid, dim3(kColumns, kRowThreads), 0, stream>>>(
      dy.data(), tokens, features, dy.row_stride(), chunk_rows, partial.data());
  COLROW_CUDA_CHECK_LAUNCH();
  bias_grad_finish<<<colrow::cuda::blocks_for(features, kThreads), kThreads, 0, stream>>>(
      partial.data(), chunks, features, db.data());
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
