// LayerNorm and RMSNorm on the GPU, with the expressions of
// kernels/cpu/norm.cpp. Row kernels: one warp per token row; each lane sums
// its strided share of the row in double and a butterfly shuffle adds the 32
// lane sums, so every lane ends with the same bits. Parameter gradients: a
// deterministic two-stage column sum in double, no atomics (stage 1: a block
// per 32 features x chunk of tokens writes partial sums; stage 2 adds them in
// chunk order and accumulates into the fp32 gradient, rounding once as the CPU does).
#include "kernels/cuda/norm.h"

#include <string>

#include "colrow/core/error.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"

namespace colrow::kernels::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 4;       // warps (rows) per row-kernel block
constexpr int kColumns = 32;           // features per stage-1 block
constexpr int kRowThreads = 8;         // threads down the tokens in a stage-1 block
constexpr int64_t kChunkRows = 128;    // tokens per stage-1 block, unless that makes too many
constexpr int64_t kMaxChunks = 65535;  // gridDim.y's limit
constexpr int kThreads = 256;

// t: [tokens, d] with a contiguous last dim.
void require_rows(const Tensor& t, int64_t tokens, int64_t d, const char* kernel,
                  const char* what) {
  if (t.ndim() != 2 || t.size(0) != tokens || t.size(1) != d || (d > 1 && t.stride(1) != 1)) {
    throw InternalError(std::string("[norm] ") + kernel + ": " + what + " " +
                        shape_to_string(t.shape()) + " must be [" + std::to_string(tokens) + ", " +
                        std::to_string(d) + "] with contiguous rows");
  }
}

// t: [n], contiguous.
void require_vector(const Tensor& t, int64_t n, const char* kernel, const char* what) {
  if (t.ndim() != 1 || t.size(0) != n || !t.is_contiguous()) {
    throw InternalError(std::string("[norm] ") + kernel + ": " + what + " " +
                        shape_to_string(t.shape()) + " must be [" + std::to_string(n) + "]");
  }
}

void require_2d(const Tensor& x, const char* kernel) {
  if (x.ndim() != 2) {
    throw InternalError(std::string("[norm] ") + kernel + ": x " + shape_to_string(x.shape()) +
                        " must be [tokens, d]");
  }
}

// The GPU every operand lives on; InternalError for a host tensor or two GPUs.
int device_of(const char* kernel, std::initializer_list<const Tensor*> tensors) {
  const Device device = (*tensors.begin())->device();
  if (!device.is_cuda()) {
    throw InternalError(std::string("[norm] ") + kernel +
                        ": operands must be CUDA tensors, got one on " + device.str());
  }
  require_device(kernel, device, tensors);
  return device.index;
}

// Row kernels: blockDim = (32, kRowsPerBlock), one warp per token row.
const dim3 kRowBlock(kWarp, kRowsPerBlock);
unsigned int row_blocks(int64_t tokens) {
  return colrow::cuda::blocks_for(tokens, kRowsPerBlock);
}

// Tokens per stage-1 chunk: a function of the shape only, so is the sum order.
int64_t chunk_rows_for(int64_t tokens) {
  const int64_t spread = (tokens + kMaxChunks - 1) / kMaxChunks;
  return spread > kChunkRows ? spread : kChunkRows;
}

// The sum of v over the warp, the same bits in every lane: at each step lanes
// i and i ^ offset add the same two values (a + b == b + a exactly).
__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The token row of this warp (blockDim = (32, kRowsPerBlock)); >= tokens when idle.
__device__ __forceinline__ int64_t warp_row() {
  return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
}

__global__ void layer_norm_forward_kernel(const float* x, int64_t ldx, const float* gamma,
                                          const float* beta, float eps, int64_t tokens, int64_t d,
                                          float* y, int64_t ldy, float* mean, float* rstd) {
  const int64_t t = warp_row();
  if (t >= tokens) return;  // a whole warp leaves together: the shuffles stay full
  const float* xr = x + t * ldx;
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < d; j += kWarp) sum += xr[j];
  const double mu = warp_sum(sum) / static_cast<double>(d);
  // Second pass about the mean: no cancellation when |mean| >> std.
  double sq = 0.0;
  for (int64_t j = threadIdx.x; j < d; j += kWarp) {
    const double c = xr[j] - mu;
    sq += c * c;
  }
  sq = warp_sum(sq);
  const float m = static_cast<float>(mu);
  const float r = static_cast<float>(1.0 / sqrt(sq / static_cast<double>(d) + eps));
  if (threadIdx.x == 0) {
    mean[t] = m;
    rstd[t] = r;
  }
  float* yr = y + t * ldy;
  for (int64_t j = threadIdx.x; j < d; j += kWarp) yr[j] = (xr[j] - m) * r * gamma[j] + beta[j];
}

__global__ void layer_norm_dx_kernel(const float* x, int64_t ldx, const float* gamma,
                                     const float* mean, const float* rstd, const float* dy,
                                     int64_t lddy, int64_t tokens, int64_t d, float* dx,
                                     int64_t lddx) {
  const int64_t t = warp_row();
  if (t >= tokens) return;
  const float *xr = x + t * ldx, *dyr = dy + t * lddy;
  const float m = mean[t], r = rstd[t];
  double sum_g = 0.0, sum_gx = 0.0;
  for (int64_t j = threadIdx.x; j < d; j += kWarp) {
    const float gj = dyr[j] * gamma[j];
    const float xhat = (xr[j] - m) * r;
    sum_g += gj;
    sum_gx += static_cast<double>(gj) * xhat;
  }
  const double inv_d = 1.0 / static_cast<double>(d);
  const float mean_g = static_cast<float>(warp_sum(sum_g) * inv_d);
  const float mean_gx = static_cast<float>(warp_sum(sum_gx) * inv_d);
  float* dxr = dx + t * lddx;
  for (int64_t j = threadIdx.x; j < d; j += kWarp) {
    const float xhat = (xr[j] - m) * r;
    dxr[j] = r * (dyr[j] * gamma[j] - mean_g - xhat * mean_gx);
  }
}

__global__ void rms_norm_forward_kernel(const float* x, int64_t ldx, const float* weight, float eps,
                                        int64_t tokens, int64_t d, float* y, int64_t ldy,
                                        float* rstd) {
  const int64_t t = warp_row();
  if (t >= tokens) return;
  const float* xr = x + t * ldx;
  double sq = 0.0;
  for (int64_t j = threadIdx.x; j < d; j += kWarp) sq += static_cast<double>(xr[j]) * xr[j];
  sq = warp_sum(sq);
  const float r = static_cast<float>(1.0 / sqrt(sq / static_cast<double>(d) + eps));
  if (threadIdx.x == 0) rstd[t] = r;
  float* yr = y + t * ldy;
  // HF order: weight * (x * rsqrt(mean(x^2) + eps)).
  for (int64_t j = threadIdx.x; j < d; j += kWarp) yr[j] = weight[j] * (xr[j] * r);
}

__global__ void rms_norm_dx_kernel(const float* x, int64_t ldx, const float* weight,
                                   const float* rstd, const float* dy, int64_t lddy, int64_t tokens,
                                   int64_t d, float* dx, int64_t lddx) {
  const int64_t t = warp_row();
  if (t >= tokens) return;
  const float *xr = x + t * ldx, *dyr = dy + t * lddy;
  const float r = rstd[t];
  double sum_gx = 0.0;
  for (int64_t j = threadIdx.x; j < d; j += kWarp) {
    sum_gx += static_cast<double>(dyr[j] * weight[j]) * (xr[j] * r);
  }
  const float mean_gx = static_cast<float>(warp_sum(sum_gx) / static_cast<double>(d));
  float* dxr = dx + t * lddx;
  for (int64_t j = threadIdx.x; j < d; j += kWarp) {
    dxr[j] = r * (dyr[j] * weight[j] - (xr[j] * r) * mean_gx);
  }
}

// Stage 1 of the parameter gradients. Block (x: 32 features, y: token chunk),
// threads (kColumns, kRowThreads); thread (c, r) walks tokens chunk_start + r,
// + r + kRowThreads, ... in that order, then the kRowThreads sums are added in
// r order. Writes, per (chunk, feature j), in double:
//   partial_gamma = sum dy xhat   (xhat = (x - mean) rstd; mean = null for RMSNorm)
//   partial_beta  = sum dy        (when partial_beta is not null)
__global__ void norm_param_grad_partials(const float* x, int64_t ldx, const float* mean,
                                         const float* rstd, const float* dy, int64_t lddy,
                                         int64_t tokens, int64_t d, int64_t chunk_rows,
                                         double* partial_gamma, double* partial_beta) {
  __shared__ double sums_gamma[kRowThreads][kColumns];
  __shared__ double sums_beta[kRowThreads][kColumns];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t t1 = t0 + chunk_rows < tokens ? t0 + chunk_rows : tokens;
  double sum_gamma = 0.0, sum_beta = 0.0;
  if (j < d) {
    for (int64_t t = t0 + threadIdx.y; t < t1; t += kRowThreads) {
      const float g = dy[t * lddy + j];
      const float m = mean != nullptr ? mean[t] : 0.0f;
      const float xhat = (x[t * ldx + j] - m) * rstd[t];
      sum_gamma += static_cast<double>(g) * xhat;
      sum_beta += g;
    }
  }
  sums_gamma[threadIdx.y][threadIdx.x] = sum_gamma;
  sums_beta[threadIdx.y][threadIdx.x] = sum_beta;
  __syncthreads();
  if (threadIdx.y == 0 && j < d) {
    double total_gamma = sums_gamma[0][threadIdx.x], total_beta = sums_beta[0][threadIdx.x];
    for (int r = 1; r < kRowThreads; ++r) {
      total_gamma += sums_gamma[r][threadIdx.x];
      total_beta += sums_beta[r][threadIdx.x];
    }
    const int64_t at = static_cast<int64_t>(blockIdx.y) * d + j;
    partial_gamma[at] = total_gamma;
    if (partial_beta != nullptr) partial_beta[at] = total_beta;
  }
}

// Stage 2: grad[j] += fp32(sum of the chunks' partials of feature j, in chunk order).
__global__ void norm_param_grad_finish(const double* partial, int64_t chunks, int64_t d,
                                       float* grad) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= d) return;
  double sum = 0.0;
  for (int64_t c = 0; c < chunks; ++c) sum += partial[c * d + j];
  grad[j] += static_cast<float>(sum);
}

// dgamma += sum_t dy xhat and (when dbeta) dbeta += sum_t dy, deterministically.
void accumulate_param_grads(int device, const Tensor& x, const float* mean, const Tensor& rstd,
                            const Tensor& dy, Tensor& dgamma, Tensor* dbeta) {
  const int64_t tokens = x.size(0), d = x.size(1);
  if (tokens == 0 || d == 0) return;
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  const int64_t chunk_rows = chunk_rows_for(tokens);
  const int64_t chunks = (tokens + chunk_rows - 1) / chunk_rows;
  const int64_t count = chunks * d;  // doubles per gradient
  // Double partials live in an fp32 tensor of twice the count: every block of
  // the caching allocator is a whole cudaMalloc allocation (256-byte aligned),
  // so the cast is aligned. Freed when this returns; the allocator hands it out
  // again only to work queued after these kernels on this stream.
  Tensor scratch = Tensor::empty({(dbeta != nullptr ? 4 : 2) * count}, Device::cuda(device));
  double* partial_gamma = reinterpret_cast<double*>(scratch.data());
  double* partial_beta = dbeta != nullptr ? partial_gamma + count : nullptr;
  const dim3 grid(colrow::cuda::blocks_for(d, kColumns), static_cast<unsigned int>(chunks));
  norm_param_grad_partials<<<grid, dim3(kColumns, kRowThreads), 0, stream>>>(
      x.data(), x.row_stride(), mean, rstd.data(), dy.data(), dy.row_stride(), tokens, d,
      chunk_rows, partial_gamma, partial_beta);
  COLROW_CUDA_CHECK_LAUNCH();
  norm_param_grad_finish<<<colrow::cuda::blocks_for(d, kThreads), kThreads, 0, stream>>>(
      partial_gamma, chunks, d, dgamma.data());
  COLROW_CUDA_CHECK_LAUNCH();
  if (dbeta != nullptr) {
    norm_param_grad_finish<<<colrow::cuda::blocks_for(d, kThreads), kThreads, 0, stream>>>(
        partial_beta, chunks, d, dbeta->data());
    COLROW_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd) {
  const char* k = "layer_norm_forward";
  require_2d(x, k);
  const int64_t tokens = x.size(0), d = x.size(1);
  require_rows(x, tokens, d, k, "x");
  require_rows(y, tokens, d, k, "y");
  require_vector(gamma, d, k, "gamma");
  require_vector(beta, d, k, "beta");
  require_vector(mean, tokens, k, "mean");
  require_vector(rstd, tokens, k, "rstd");
  if (tokens == 0) return;
  const int device = device_of(k, {&x, &gamma, &beta, &y, &mean, &rstd});
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  layer_norm_forward_kernel<<<row_blocks(tokens), kRowBlock, 0, stream>>>(
      x.data(), x.row_stride(), gamma.data(), beta.data(), eps, tokens, d, y.data(), y.row_stride(),
      mean.data(), rstd.data());
  COLROW_CUDA_CHECK_LAUNCH();
}

void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                         Tensor& dbeta) {
  const char* k = "layer_norm_backward";
  require_2d(x, k);
  const int64_t tokens = x.size(0), d = x.size(1);
  require_rows(x, tokens, d, k, "x");
  require_rows(dy, tokens, d, k, "dy");
  require_rows(dx, tokens, d, k, "dx");
  require_vector(gamma, d, k, "gamma");
  require_vector(mean, tokens, k, "mean");
  require_vector(rstd, tokens, k, "rstd");
  require_vector(dgamma, d, k, "dgamma");
  require_vector(dbeta, d, k, "dbeta");
  if (tokens == 0) return;
  const int device = device_of(k, {&x, &gamma, &mean, &rstd, &dy, &dx, &dgamma, &dbeta});
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  layer_norm_dx_kernel<<<row_blocks(tokens), kRowBlock, 0, stream>>>(
      x.data(), x.row_stride(), gamma.data(), mean.data(), rstd.data(), dy.data(), dy.row_stride(),
      tokens, d, dx.data(), dx.row_stride());
  COLROW_CUDA_CHECK_LAUNCH();
  accumulate_param_grads(device, x, mean.data(), rstd, dy, dgamma, &dbeta);
}

void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd) {
  const char* k = "rms_norm_forward";
  require_2d(x, k);
  const int64_t tokens = x.size(0), d = x.size(1);
  require_rows(x, tokens, d, k, "x");
  require_rows(y, tokens, d, k, "y");
  require_vector(weight, d, k, "weight");
  require_vector(rstd, tokens, k, "rstd");
  if (tokens == 0) return;
  const int device = device_of(k, {&x, &weight, &y, &rstd});
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  rms_norm_forward_kernel<<<row_blocks(tokens), kRowBlock, 0, stream>>>(
      x.data(), x.row_stride(), weight.data(), eps, tokens, d, y.data(), y.row_stride(),
      rstd.data());
  COLROW_CUDA_CHECK_LAUNCH();
}

void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                       Tensor& dx, Tensor& dweight) {
  const char* k = "rms_norm_backward";
  require_2d(x, k);
  const int64_t tokens = x.size(0), d = x.size(1);
  require_rows(x, tokens, d, k, "x");
  require_rows(dy, tokens, d, k, "dy");
  require_rows(dx, tokens, d, k, "dx");
  require_vector(weight, d, k, "weight");
  require_vector(rstd, tokens, k, "rstd");
  require_vector(dweight, d, k, "dweight");
  if (tokens == 0) return;
  const int device = device_of(k, {&x, &weight, &rstd, &dy, &dx, &dweight});
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  rms_norm_dx_kernel<<<row_blocks(tokens), kRowBlock, 0, stream>>>(
      x.data(), x.row_stride(), weight.data(), rstd.data(), dy.data(), dy.row_stride(), tokens, d,
      dx.data(), dx.row_stride());
  COLROW_CUDA_CHECK_LAUNCH();
  accumulate_param_grads(device, x, nullptr, rstd, dy, dweight, nullptr);
}

}  // namespace colrow::kernels::cuda
