// Causal attention on the GPU: per query head, cuBLAS strided-batched GEMMs
// over the sequences of the batch, plus warp-per-row softmax kernels. The plain
// reference kernel (the whole T x T score matrix is computed, then masked); a
// fused flash kernel replaces it later.
// Legend: B batch, T seq (queries i, keys j), NH query heads, NKV key/value
// heads, HS head_dim, G = NH / NKV query heads per KV head (h reads g = h / G).
// Row-major [r, c] with row stride ld is, to column-major cuBLAS, the matrix
// [c, r] with leading dimension ld: every product below is written for those
// transposed views (C^T = B^T A^T), so nothing is ever copied.
// dK and dV are overwritten by the first query head of each group (beta = 0)
// and accumulated by the next ones in head order (beta = 1): deterministic.
#include "kernels/cuda/attention.h"

#include <cuda_runtime.h>

#include <climits>
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/attention_window.h"
#include "kernels/checks/attention.h"
#include "kernels/cuda/cublas_handle.h"
#include "kernels/cuda/operands.h"
#include "kernels/cuda/reductions.cuh"

namespace colrow::kernels::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // one warp per row of P or dS
constexpr int kThreads = kWarp * kRowsPerBlock;

// cuBLAS takes int sizes, leading dims and batch counts.
void check_int_range(const AttentionDims& d, std::initializer_list<const Tensor*> operands,
                     const char* what) {
  for (const Tensor* t : operands) {
    if (t->row_stride() > INT_MAX) attention_fail(what, "a row stride exceeds cuBLAS's int range");
  }
  if (d.seq > INT_MAX || d.batch > INT_MAX) {
    attention_fail(what, "batch or seq exceeds cuBLAS's int range");
  }
}

// One operand of a strided-batched GEMM: column-major view, leading dimension,
// distance between consecutive batch entries (sequences).
struct Operand {
  const float* data;
  int64_t ld;
  int64_t batch_stride;
};

// C_b = alpha op(A_b) op(B_b) + beta C_b for b < batch; op(A): [m, k], op(B): [k, n],
// C: [m, n], all column-major. beta = 0 never reads C.
void gemm_batched(cublasHandle_t handle, cublasOperation_t trans_a, cublasOperation_t trans_b,
                  int64_t m, int64_t n, int64_t k, float alpha, Operand a, Operand b, float beta,
                  float* c, int64_t ldc, int64_t c_stride, int64_t batch) {
  COLROW_CUBLAS_CHECK(cublasSgemmStridedBatched(
      handle, trans_a, trans_b, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
      &alpha, a.data, static_cast<int>(a.ld), a.batch_stride, b.data, static_cast<int>(b.ld),
      b.batch_stride, &beta, c, static_cast<int>(ldc), c_stride, static_cast<int>(batch)));
}

// probs: [rows, T] holding scale Q K^T; row r is query i = r mod T. The
// visible keys [first, i] (first = 0, or i - window + 1 with a sliding
// window) become their softmax (fp32, max subtracted so exp never
// overflows), the others 0. One warp per row.
__global__ void causal_softmax(float* probs, int64_t rows, int64_t seq, int64_t window) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;  // the whole warp leaves together
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t i = row % seq;
  const int64_t first = first_visible_key(i, window);
  float* p = probs + row * seq;
  float max = -INFINITY;
  for (int64_t j = first + lane; j <= i; j += kWarp) max = fmaxf(max, p[j]);
  max = warp_max(max);
  float sum = 0.0f;
  for (int64_t j = first + lane; j <= i; j += kWarp) {
    const float e = expf(p[j] - max);
    p[j] = e;
    sum += e;
  }
  const float inv = 1.0f / warp_sum(sum);
  for (int64_t j = lane; j < seq; j += kWarp) p[j] = j >= first && j <= i ? p[j] * inv : 0.0f;
}

// For one query head: ds: [B*T, T] holding dP, probs_h: P of that head, rows
// of sequence b at probs_h + b * probs_batch_stride. In place:
// dS = P * (dP - rowsum(dP * P)) on keys [0, i], 0 on the masked keys.
__global__ void causal_softmax_backward(const float* probs_h, int64_t probs_batch_stride, float* ds,
                                        int64_t rows, int64_t seq) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t b = row / seq, i = row % seq;
  const float* p = probs_h + b * probs_batch_stride + i * seq;
  float* d = ds + row * seq;
  float dot = 0.0f;
  for (int64_t j = lane; j <= i; j += kWarp) dot += d[j] * p[j];
  dot = warp_sum(dot);
  for (int64_t j = lane; j < seq; j += kWarp) d[j] = j <= i ? p[j] * (d[j] - dot) : 0.0f;
}

float softmax_scale(int64_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                       Tensor& probs, Tensor& out) {
  const char* what = "attention_forward";
  const AttentionDims d = check_attention(q, k, v, probs, out, what);
  check_window(window, what);
  const int device = cuda_device_of(what, {&probs, &q, &k, &v, &out});
  check_int_range(d, {&q, &k, &v, &out}, what);
  cublasHandle_t handle = colrow::cuda::cublas_handle(device);
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  const float scale = softmax_scale(d.head_dim);
  const int64_t T = d.seq, HS = d.head_dim, tt = T * T;
  const int64_t ldq = q.row_stride(), ldk = k.row_stride(), ldv = v.row_stride();
  const int64_t ldo = out.row_stride();
  float* p = probs.data();
  // S_h^T = scale K_g Q_h^T for every head: [T keys, T queries] column-major,
  // which is S_h row-major at probs[b, h].
  for (int64_t h = 0; h < d.n_head; ++h) {
    const int64_t g = h / d.group;
    gemm_batched(handle, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, scale,
                 {k.data() + g * HS, ldk, T * ldk}, {q.data() + h * HS, ldq, T * ldq}, 0.0f,
                 p + h * tt, T, d.n_head * tt, d.batch);
  }
  const int64_t rows = d.batch * d.n_head * T;
  causal_softmax<<<colrow::cuda::blocks_for(rows, kRowsPerBlock), kThreads, 0, stream>>>(p, rows, T,
                                                                                         window);
  COLROW_CUDA_CHECK_LAUNCH();
  // O_h^T = V_g^T P_h^T: [HS, T] column-major = O_h row-major.
  for (int64_t h = 0; h < d.n_head; ++h) {
    const int64_t g = h / d.group;
    gemm_batched(handle, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, 1.0f,
                 {v.data() + g * HS, ldv, T * ldv}, {p + h * tt, T, d.n_head * tt}, 0.0f,
                 out.data() + h * HS, ldo, T * ldo, d.batch);
  }
}

Shape attention_backward_scratch_shape(int64_t batch, int64_t /*n_head*/, int64_t seq) {
  return {batch, seq, seq};
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& scratch) {
  const char* what = "attention_backward";
  const AttentionDims d = check_attention(q, k, v, probs, dout, what);
  check_attention_grads(q, k, d, dq, dk, dv, what);
  if (scratch.ndim() != 3 || !scratch.is_contiguous() || scratch.size(0) < d.batch ||
      scratch.size(1) != d.seq || scratch.size(2) != d.seq) {
    attention_fail(what,
                   "scratch " + shape_to_string(scratch.shape()) + " must be at least " +
                       shape_to_string(attention_backward_scratch_shape(d.batch, d.n_head, d.seq)));
  }
  const int device = cuda_device_of(what, {&probs, &q, &k, &v, &dout, &dq, &dk, &dv, &scratch});
  check_int_range(d, {&q, &k, &v, &dout, &dq, &dk, &dv}, what);
  cublasHandle_t handle = colrow::cuda::cublas_handle(device);
  cudaStream_t stream = colrow::cuda::compute_stream(device);
  const float scale = softmax_scale(d.head_dim);
  const int64_t T = d.seq, HS = d.head_dim, tt = T * T, p_stride = d.n_head * tt;
  const int64_t ldq = q.row_stride(), ldk = k.row_stride(), ldv = v.row_stride();
  const int64_t lddo = dout.row_stride(), lddq = dq.row_stride(), lddk = dk.row_stride(),
                lddv = dv.row_stride();
  const float* p = probs.data();
  float* ds = scratch.data();  // [B, T, T]: dP, then dS, of the current head
  const int64_t rows = d.batch * T;
  for (int64_t h = 0; h < d.n_head; ++h) {
    const int64_t g = h / d.group;
    const float accumulate = h % d.group == 0 ? 0.0f : 1.0f;  // first head of its group overwrites
    const Operand p_h{p + h * tt, T, p_stride};               // column-major P_h^T
    const Operand do_h{dout.data() + h * HS, lddo, T * lddo};
    const Operand q_h{q.data() + h * HS, ldq, T * ldq};
    const Operand k_g{k.data() + g * HS, ldk, T * ldk};
    const Operand v_g{v.data() + g * HS, ldv, T * ldv};
    const Operand ds_h{ds, T, tt};  // column-major dS^T
    // dV_g^T (+)= dO_h^T P_h: [HS, T]
    gemm_batched(handle, CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, 1.0f, do_h, p_h, accumulate,
                 dv.data() + g * HS, lddv, T * lddv, d.batch);
    // dP^T = V_g dO_h^T: [T keys, T queries] column-major = dP row-major
    gemm_batched(handle, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, 1.0f, v_g, do_h, 0.0f, ds, T, tt,
                 d.batch);
    causal_softmax_backward<<<colrow::cuda::blocks_for(rows, kRowsPerBlock), kThreads, 0, stream>>>(
        p + h * tt, p_stride, ds, rows, T);
    COLROW_CUDA_CHECK_LAUNCH();
    // dQ_h^T = scale K_g^T dS^T: [HS, T]
    gemm_batched(handle, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, scale, k_g, ds_h, 0.0f,
                 dq.data() + h * HS, lddq, T * lddq, d.batch);
    // dK_g^T (+)= scale Q_h^T dS: [HS, T]
    gemm_batched(handle, CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, scale, q_h, ds_h, accumulate,
                 dk.data() + g * HS, lddk, T * lddk, d.batch);
  }
}

}  // namespace colrow::kernels::cuda
