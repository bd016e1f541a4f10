// Causal attention, forward and backward, as GEMMs on per-head views.
// Legend: B batch, T seq (queries i, keys j), NH query heads, NKV key/value
// heads, HS head_dim. Work is split over (sequence, query head) forward and
// over (sequence, KV head) backward, where the query heads sharing a KV head
// accumulate into its dK and dV one after another (no two threads write the
// same rows). Inside an OpenMP region OpenBLAS runs single-threaded; with one
// unit of work the region is skipped and BLAS threads the GEMMs instead.
// This file is compiled with -ffast-math (see src/CMakeLists.txt) so that the
// softmax's exp runs as glibc's vector expf (libmvec, a few ulp): with scalar
// expf the T^2/2 exponentials per head cost more than the GEMMs around them.
#include "kernels/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/attention_window.h"
#include "kernels/checks/attention.h"
#include "kernels/cpu/gemm.h"

namespace colrow::kernels::cpu {
namespace {

// Query rows per block: the GEMMs of block [r0, r1) read keys [0, r1) only,
// so about kRowBlock / (2 T) of the masked triangle is computed, not half of it.
constexpr int64_t kRowBlock = 64;
// Below this many multiply-adds (B NH T^2 HS) one thread is faster. Work, not
// elements: the element-wise kernels' threshold is kernels/cpu/parallel.h.
constexpr int64_t kParallelWork = 1 << 16;

// Head h of sequence b: rows [b T, (b+1) T), columns [h HS, (h+1) HS). A view.
Tensor head(const Tensor& x, const AttentionDims& d, int64_t b, int64_t h) {
  return x.slice(0, b * d.seq, d.seq).slice(1, h * d.head_dim, d.head_dim);
}

float softmax_scale(int64_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

// Row i of P (length T) holds scores for keys [0, i]: replace the visible
// ones, [first, i], by their softmax (max subtracted, so exp never overflows)
// and zero the masked rest. The loops vectorize under -ffast-math, reductions
// included (an "omp simd" here, inlined into the parallel region, keeps GCC 12
// from vectorizing).
void causal_softmax_row(float* row, int64_t i, int64_t seq, int64_t window) {
  const int64_t first = first_visible_key(i, window);
  float max = row[first];
  for (int64_t j = first + 1; j <= i; ++j) max = std::max(max, row[j]);
  float sum = 0.0f;
  for (int64_t j = first; j <= i; ++j) {
    const float e = std::exp(row[j] - max);
    row[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (int64_t j = first; j <= i; ++j) row[j] *= inv;
  std::fill(row, row + first, 0.0f);
  std::fill(row + i + 1, row + seq, 0.0f);
}

// dS = P * (dP - rowsum(dP * P)) over keys [0, i], in place over dP; zero for
// the masked keys (i, end).
void softmax_backward_row(const float* p, float* ds, int64_t i, int64_t end) {
  float dot = 0.0f;
  for (int64_t j = 0; j <= i; ++j) dot += ds[j] * p[j];
  for (int64_t j = 0; j <= i; ++j) ds[j] = p[j] * (ds[j] - dot);
  std::fill(ds + i + 1, ds + end, 0.0f);
}

// One (sequence, query head): P and O for query rows block by block.
// q_h, k_g, v_g, o_h: [T, HS] views; p: [T, T].
void forward_head(const Tensor& q_h, const Tensor& k_g, const Tensor& v_g, Tensor& p, Tensor& o_h,
                  float scale, int64_t window) {
  const int64_t seq = p.size(0);
  for (int64_t r0 = 0; r0 < seq; r0 += kRowBlock) {
    const int64_t r1 = std::min(seq, r0 + kRowBlock), rows = r1 - r0;
    // S[r0:r1, 0:r1] = scale Q[r0:r1] K[0:r1]^T  ([rows, HS] x [HS, r1])
    Tensor s = p.slice(0, r0, rows).slice(1, 0, r1);
    gemm(Trans::kNo, Trans::kYes, scale, q_h.slice(0, r0, rows), k_g.slice(0, 0, r1), 0.0f, s);
    for (int64_t i = r0; i < r1; ++i) causal_softmax_row(p.data() + i * seq, i, seq, window);
    // O[r0:r1] = P[r0:r1, 0:r1] V[0:r1]  ([rows, r1] x [r1, HS])
    Tensor o = o_h.slice(0, r0, rows);
    gemm(Trans::kNo, Trans::kNo, 1.0f, s, v_g.slice(0, 0, r1), 0.0f, o);
  }
}

// One (sequence, query head) of backward, adding into its KV head's dK, dV.
// ds_buf: [T, T] scratch for dP, then dS.
void backward_head(const Tensor& q_h, const Tensor& k_g, const Tensor& v_g, const Tensor& p,
                   const Tensor& do_h, Tensor& dq_h, Tensor& dk_g, Tensor& dv_g, Tensor& ds_buf,
                   float scale) {
  const int64_t seq = p.size(0);
  for (int64_t r0 = 0; r0 < seq; r0 += kRowBlock) {
    const int64_t r1 = std::min(seq, r0 + kRowBlock), rows = r1 - r0;
    const Tensor p_blk = p.slice(0, r0, rows).slice(1, 0, r1);  // [rows, r1]
    const Tensor do_blk = do_h.slice(0, r0, rows);              // [rows, HS]
    const Tensor q_blk = q_h.slice(0, r0, rows);
    Tensor dk = dk_g.slice(0, 0, r1), dv = dv_g.slice(0, 0, r1);  // [r1, HS]
    // dV[0:r1] += P_blk^T dO_blk  ([r1, rows] x [rows, HS])
    gemm(Trans::kYes, Trans::kNo, 1.0f, p_blk, do_blk, 1.0f, dv);
    // dP = dO_blk V[0:r1]^T  ([rows, HS] x [HS, r1]), then dS in place
    Tensor ds = ds_buf.slice(0, 0, rows).slice(1, 0, r1);
    gemm(Trans::kNo, Trans::kYes, 1.0f, do_blk, v_g.slice(0, 0, r1), 0.0f, ds);
    for (int64_t i = r0; i < r1; ++i) {
      softmax_backward_row(p.data() + i * seq, ds_buf.data() + (i - r0) * seq, i, r1);
    }
    // dQ[r0:r1] = scale dS K[0:r1]  ([rows, r1] x [r1, HS])
    Tensor dq = dq_h.slice(0, r0, rows);
    gemm(Trans::kNo, Trans::kNo, scale, ds, k_g.slice(0, 0, r1), 0.0f, dq);
    // dK[0:r1] += scale dS^T Q_blk  ([r1, rows] x [rows, HS])
    gemm(Trans::kYes, Trans::kNo, scale, ds, q_blk, 1.0f, dk);
  }
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                       Tensor& probs, Tensor& out) {
  const AttentionDims d = check_attention(q, k, v, probs, out, "attention_forward");
  check_window(window, "attention_forward");
  const float scale = softmax_scale(d.head_dim);
  const Tensor p_all = probs.view({d.batch * d.n_head * d.seq, d.seq});
  const int64_t units = d.batch * d.n_head;
  const int64_t work = units * d.seq * d.seq * d.head_dim;
#pragma omp parallel for schedule(static) if (units > 1 && work > kParallelWork)
  for (int64_t u = 0; u < units; ++u) {
    const int64_t b = u / d.n_head, h = u % d.n_head, g = h / d.group;
    Tensor p = p_all.slice(0, u * d.seq, d.seq);  // [T, T]
    Tensor o_h = head(out, d, b, h);
    forward_head(head(q, d, b, h), head(k, d, b, g), head(v, d, b, g), p, o_h, scale, window);
  }
}

Shape attention_backward_scratch_shape(int64_t seq) {
  return {static_cast<int64_t>(omp_get_max_threads()), seq, seq};
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& scratch) {
  const char* what = "attention_backward";
  const AttentionDims d = check_attention(q, k, v, probs, dout, what);
  check_attention_grads(q, k, d, dq, dk, dv, what);
  if (scratch.ndim() != 3 || !scratch.is_contiguous() || scratch.size(1) != d.seq ||
      scratch.size(2) != d.seq || scratch.size(0) < omp_get_max_threads()) {
    attention_fail(what, "scratch " + shape_to_string(scratch.shape()) + " must be at least " +
                             shape_to_string(attention_backward_scratch_shape(d.seq)));
  }
  const float scale = softmax_scale(d.head_dim);
  const Tensor p_all = probs.view({d.batch * d.n_head * d.seq, d.seq});
  const Tensor ds_all = scratch.view({scratch.size(0) * d.seq, d.seq});
  const int64_t units = d.batch * d.n_kv_head;
  const int64_t work = d.batch * d.n_head * d.seq * d.seq * d.head_dim;
#pragma omp parallel for schedule(static) if (units > 1 && work > kParallelWork)
  for (int64_t u = 0; u < units; ++u) {
    const int64_t b = u / d.n_kv_head, g = u % d.n_kv_head;
    Tensor ds_buf = ds_all.slice(0, omp_get_thread_num() * d.seq, d.seq);
    const Tensor k_g = head(k, d, b, g), v_g = head(v, d, b, g);
    Tensor dk_g = head(dk, d, b, g), dv_g = head(dv, d, b, g);
    dk_g.zero();
    dv_g.zero();
    for (int64_t h = g * d.group; h < (g + 1) * d.group; ++h) {
      const Tensor p = p_all.slice(0, (b * d.n_head + h) * d.seq, d.seq);
      Tensor dq_h = head(dq, d, b, h);
      backward_head(head(q, d, b, h), k_g, v_g, p, head(dout, d, b, h), dq_h, dk_g, dv_g, ds_buf,
                    scale);
    }
  }
}

}  // namespace colrow::kernels::cpu
