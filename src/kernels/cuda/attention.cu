// Causal attention on the GPU: cuBLAS batched GEMMs over every (sequence,
// head) pair, plus warp-per-row softmax kernels. The queries are cut into
// blocks of Tb rows (query_block: 8 blocks, at least 32 rows) and each block's
// products stop at the block's last key, so the masked upper triangle is
// mostly never computed: (nb + 1) / (2 nb) of the full T x T work, 56% with 8
// blocks; the key gradients take key blocks over the queries from the block's
// first row on. The batched GEMMs read their operands through device pointer
// tables that one small kernel fills per call (no host synchronization). The
// probabilities [B, NH, T, T] are stored for the backward. The fused kernels
// (flash_attention.h) never store them; these stay as their reference
// (--attention plain).
// Legend: B batch, T seq (queries i, keys j), NH query heads, NKV key/value
// heads, HS head_dim, G = NH / NKV query heads per KV head (h reads g = h / G).
// Row-major [r, c] with row stride ld is, to column-major cuBLAS, the matrix
// [c, r] with leading dimension ld: every product below is written for those
// transposed views (C^T = B^T A^T), so nothing is ever copied.
// dK and dV are overwritten by the first query head of each group (beta = 0)
// and accumulated by the next ones in head order (beta = 1): deterministic.
// Every output element is written by one GEMM entry: no atomics.
#include "kernels/cuda/attention.h"

#include <cuda_runtime.h>

#include <algorithm>
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
  if (d.seq > INT_MAX || d.batch * d.n_head > INT_MAX) {
    attention_fail(what, "batch x heads or seq exceeds cuBLAS's int range");
  }
}

// Rows per query block: T / 8 rounded up to a multiple of 32, at least 32.
int64_t query_block(int64_t seq) {
  const int64_t eighth = (seq + 7) / 8;
  return std::max<int64_t>(32, (eighth + 31) / 32 * 32);
}

// One table of batched-GEMM operand pointers, blocks x entries long: entry e =
// b * heads + hh of block blk points at
//   base + blk * per_block + b * per_batch + (hh / head_div) * per_head.
struct PointerRule {
  const float* base;
  int64_t per_block;
  int64_t per_batch;
  int64_t per_head;
  int64_t head_div;
};

constexpr int kMaxRules = 6;

struct PointerRules {
  PointerRule rule[kMaxRules];
  int count;
  int64_t blocks;
  int64_t entries;  // batch * heads
  int64_t heads;
};

// tables[(rule * blocks + blk) * entries + e], per PointerRule.
__global__ void fill_pointer_tables(PointerRules r, const float** tables) {
  const int64_t n = r.count * r.blocks * r.entries;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = t % r.entries, blk = (t / r.entries) % r.blocks;
    const PointerRule& p = r.rule[t / (r.entries * r.blocks)];
    const int64_t b = e / r.heads, hh = e % r.heads;
    tables[t] = p.base + blk * p.per_block + b * p.per_batch + (hh / p.head_div) * p.per_head;
  }
}

// The pointer tables of one call, on the GPU: table(rule, blk) is the
// entries-long array of rule `rule` for block `blk`. The memory goes back to
// the stream-ordered cache when the call returns, after the GEMMs are queued.
class PointerTables {
 public:
  PointerTables(const PointerRules& rules, int device, cudaStream_t stream)
      : rules_(rules),
        memory_(
            Tensor::empty({rules.count * rules.blocks * rules.entries * 2}, Device::cuda(device))),
        tables_(reinterpret_cast<const float**>(memory_.data())) {
    const int64_t n = rules.count * rules.blocks * rules.entries;
    fill_pointer_tables<<<colrow::cuda::blocks_for(n, 256), 256, 0, stream>>>(rules, tables_);
    COLROW_CUDA_CHECK_LAUNCH();
  }
  const float* const* operand(int rule, int64_t blk) const {
    return tables_ + (rule * rules_.blocks + blk) * rules_.entries;
  }
  float* const* result(int rule, int64_t blk) const {
    return const_cast<float* const*>(operand(rule, blk));
  }

 private:
  PointerRules rules_;
  Tensor memory_;  // pointers, 8 bytes = 2 floats each
  const float** tables_;
};

// C_e = alpha op(A_e) op(B_e) + beta C_e for every entry e of the tables;
// op(A): [m, k], op(B): [k, n], C: [m, n], all column-major. beta = 0 never
// reads C.
void gemm_tables(cublasHandle_t handle, cublasOperation_t trans_a, cublasOperation_t trans_b,
                 int64_t m, int64_t n, int64_t k, float alpha, const float* const* a, int64_t lda,
                 const float* const* b, int64_t ldb, float beta, float* const* c, int64_t ldc,
                 int64_t entries) {
  COLROW_CUBLAS_CHECK(cublasSgemmBatched(handle, trans_a, trans_b, static_cast<int>(m),
                                         static_cast<int>(n), static_cast<int>(k), &alpha, a,
                                         static_cast<int>(lda), b, static_cast<int>(ldb), &beta, c,
                                         static_cast<int>(ldc), static_cast<int>(entries)));
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

// probs, ds: [rows, T] alike (rows = B * NH * T; row r is query i = r mod T),
// ds holding dP on keys [0, kend) with kend the end of i's query block. In
// place: dS = P * (dP - rowsum(dP * P)) on keys [0, i], 0 on keys (i, kend).
// Keys from kend on are never read.
__global__ void causal_softmax_backward(const float* probs, float* ds, int64_t rows, int64_t seq,
                                        int64_t block) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t i = row % seq;
  const int64_t kend = std::min(seq, (i / block + 1) * block);
  const float* p = probs + row * seq;
  float* d = ds + row * seq;
  float dot = 0.0f;
  for (int64_t j = lane; j <= i; j += kWarp) dot += d[j] * p[j];
  dot = warp_sum(dot);
  for (int64_t j = lane; j < kend; j += kWarp) d[j] = j <= i ? p[j] * (d[j] - dot) : 0.0f;
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
  const int64_t T = d.seq, HS = d.head_dim, tt = T * T, NH = d.n_head, G = d.group;
  const int64_t Tb = query_block(T), blocks = (T + Tb - 1) / Tb, entries = d.batch * NH;
  const int64_t ldq = q.row_stride(), ldk = k.row_stride(), ldv = v.row_stride();
  const int64_t ldo = out.row_stride();
  enum { kK, kQ, kP, kV, kO };
  const PointerTables tables({{{k.data(), 0, T * ldk, HS, G},
                               {q.data(), Tb * ldq, T * ldq, HS, 1},
                               {probs.data(), Tb * T, NH * tt, tt, 1},
                               {v.data(), 0, T * ldv, HS, G},
                               {out.data(), Tb * ldo, T * ldo, HS, 1}},
                              5,
                              blocks,
                              entries,
                              NH},
                             device, stream);
  // Query block [i0, i0 + rows) sees keys [0, kend = i0 + rows).
  // S^T = scale K Q^T: [kend keys, rows queries] column-major, which is the
  // block's rows of S row-major in probs.
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t rows = std::min(Tb, T - blk * Tb), kend = blk * Tb + rows;
    gemm_tables(handle, CUBLAS_OP_T, CUBLAS_OP_N, kend, rows, HS, scale, tables.operand(kK, blk),
                ldk, tables.operand(kQ, blk), ldq, 0.0f, tables.result(kP, blk), T, entries);
  }
  const int64_t all_rows = d.batch * NH * T;
  causal_softmax<<<colrow::cuda::blocks_for(all_rows, kRowsPerBlock), kThreads, 0, stream>>>(
      probs.data(), all_rows, T, window);
  COLROW_CUDA_CHECK_LAUNCH();
  // O^T = V^T P^T: [HS, rows] column-major = the block's rows of O.
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t rows = std::min(Tb, T - blk * Tb), kend = blk * Tb + rows;
    gemm_tables(handle, CUBLAS_OP_N, CUBLAS_OP_N, HS, rows, kend, 1.0f, tables.operand(kV, blk),
                ldv, tables.operand(kP, blk), T, 0.0f, tables.result(kO, blk), ldo, entries);
  }
}

Shape attention_backward_scratch_shape(int64_t batch, int64_t n_head, int64_t seq) {
  return {batch * n_head, seq, seq};
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& scratch) {
  const char* what = "attention_backward";
  const AttentionDims d = check_attention(q, k, v, probs, dout, what);
  check_attention_grads(q, k, d, dq, dk, dv, what);
  if (scratch.ndim() != 3 || !scratch.is_contiguous() || scratch.size(0) < d.batch * d.n_head ||
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
  const int64_t T = d.seq, HS = d.head_dim, tt = T * T, NH = d.n_head, G = d.group;
  const int64_t Tb = query_block(T), blocks = (T + Tb - 1) / Tb;
  const int64_t ldq = q.row_stride(), ldk = k.row_stride(), ldv = v.row_stride();
  const int64_t lddo = dout.row_stride(), lddq = dq.row_stride(), lddk = dk.row_stride(),
                lddv = dv.row_stride();
  float* ds = scratch.data();  // [B, NH, T, T] like probs: dP, then dS

  // Query blocks, over every (sequence, query head): dP, dS, dQ.
  enum { kV, kDO, kDS, kK, kDQ };
  const PointerTables by_query({{{v.data(), 0, T * ldv, HS, G},
                                 {dout.data(), Tb * lddo, T * lddo, HS, 1},
                                 {ds, Tb * T, NH * tt, tt, 1},
                                 {k.data(), 0, T * ldk, HS, G},
                                 {dq.data(), Tb * lddq, T * lddq, HS, 1}},
                                5,
                                blocks,
                                d.batch * NH,
                                NH},
                               device, stream);
  for (int64_t blk = 0; blk < blocks; ++blk) {  // dP^T = V dO^T: [kend, rows]
    const int64_t rows = std::min(Tb, T - blk * Tb), kend = blk * Tb + rows;
    gemm_tables(handle, CUBLAS_OP_T, CUBLAS_OP_N, kend, rows, HS, 1.0f, by_query.operand(kV, blk),
                ldv, by_query.operand(kDO, blk), lddo, 0.0f, by_query.result(kDS, blk), T,
                d.batch * NH);
  }
  const int64_t all_rows = d.batch * NH * T;
  causal_softmax_backward<<<colrow::cuda::blocks_for(all_rows, kRowsPerBlock), kThreads, 0,
                            stream>>>(probs.data(), ds, all_rows, T, Tb);
  COLROW_CUDA_CHECK_LAUNCH();
  for (int64_t blk = 0; blk < blocks; ++blk) {  // dQ^T = scale K^T dS^T: [HS, rows]
    const int64_t rows = std::min(Tb, T - blk * Tb), kend = blk * Tb + rows;
    gemm_tables(handle, CUBLAS_OP_N, CUBLAS_OP_N, HS, rows, kend, scale, by_query.operand(kK, blk),
                ldk, by_query.operand(kDS, blk), T, 0.0f, by_query.result(kDQ, blk), lddq,
                d.batch * NH);
  }

  // Key blocks [j0, j0 + cols), over every (sequence, KV head), for the r-th
  // query head of each group in turn (r = 0 overwrites, the next ones add):
  // dV^T (+)= dO^T P and dK^T (+)= scale Q^T dS over the queries [j0, T).
  for (int64_t r = 0; r < G; ++r) {
    enum { kDOr, kPr, kDV, kQr, kDSr, kDK };
    const PointerTables by_key({{{dout.data() + r * HS, Tb * lddo, T * lddo, G * HS, 1},
                                 {probs.data() + r * tt, Tb * (T + 1), NH * tt, G * tt, 1},
                                 {dv.data(), Tb * lddv, T * lddv, HS, 1},
                                 {q.data() + r * HS, Tb * ldq, T * ldq, G * HS, 1},
                                 {ds + r * tt, Tb * (T + 1), NH * tt, G * tt, 1},
                                 {dk.data(), Tb * lddk, T * lddk, HS, 1}},
                                6,
                                blocks,
                                d.batch * d.n_kv_head,
                                d.n_kv_head},
                               device, stream);
    const float accumulate = r == 0 ? 0.0f : 1.0f;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t cols = std::min(Tb, T - blk * Tb), queries = T - blk * Tb;
      gemm_tables(handle, CUBLAS_OP_N, CUBLAS_OP_T, HS, cols, queries, 1.0f,
                  by_key.operand(kDOr, blk), lddo, by_key.operand(kPr, blk), T, accumulate,
                  by_key.result(kDV, blk), lddv, d.batch * d.n_kv_head);
      gemm_tables(handle, CUBLAS_OP_N, CUBLAS_OP_T, HS, cols, queries, scale,
                  by_key.operand(kQr, blk), ldq, by_key.operand(kDSr, blk), T, accumulate,
                  by_key.result(kDK, blk), lddk, d.batch * d.n_kv_head);
    }
  }
}

}  // namespace colrow::kernels::cuda
