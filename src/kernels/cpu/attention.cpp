// Causal attention, forward and backward, as GEMMs on per-head views.
// Legend: B batch, T seq (queries i, keys j), NH query heads, NKV key/value
// heads, HS head_dim. Work is split over (sequence, query head, block of query
// rows) forward; backward runs in two passes, so that one sequence of a few
// heads still keeps 16 threads busy:
//   1. per (sequence, query head, query block): dP, then dS (kept in the
//      scratch, one T x T slab per head) and dQ of its rows;
//   2. per (sequence, KV head, key block): dV and dK of its keys, from P and
//      the kept dS of the query heads that share the KV head, in head order.
// Heads go through in chunks of as many as the scratch has slabs (one chunk
// when B NH <= threads). Every output element is written by one task in an
// order set by the shape, so the bits do not depend on the thread count or
// the chunking. Inside an OpenMP region OpenBLAS runs single-threaded; with
// one task the region is skipped and BLAS threads the GEMMs instead.
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
#include "kernels/cpu/parallel.h"

namespace colrow::kernels::cpu {
namespace {

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

// Query rows [r0, r1) of one (sequence, query head): their P and O.
// q_h, k_g, v_g, o_h: [T, HS] views; p: [T, T].
void forward_rows(const Tensor& q_h, const Tensor& k_g, const Tensor& v_g, Tensor& p, Tensor& o_h,
                  float scale, int64_t window, int64_t r0, int64_t r1) {
  const int64_t seq = p.size(0), rows = r1 - r0;
  // S[r0:r1, 0:r1] = scale Q[r0:r1] K[0:r1]^T  ([rows, HS] x [HS, r1])
  Tensor s = p.slice(0, r0, rows).slice(1, 0, r1);
  gemm(Trans::kNo, Trans::kYes, scale, q_h.slice(0, r0, rows), k_g.slice(0, 0, r1), 0.0f, s);
  for (int64_t i = r0; i < r1; ++i) causal_softmax_row(p.data() + i * seq, i, seq, window);
  // O[r0:r1] = P[r0:r1, 0:r1] V[0:r1]  ([rows, r1] x [r1, HS])
  Tensor o = o_h.slice(0, r0, rows);
  gemm(Trans::kNo, Trans::kNo, 1.0f, s, v_g.slice(0, 0, r1), 0.0f, o);
}

// Backward pass 1, query rows [r0, r1) of one (sequence, query head): dS of
// those rows, keys [0, r1), into ds_h (zeros above the diagonal), and dQ.
// ds_h: [T, T], this head's slab of the scratch.
void backward_query_rows(const Tensor& k_g, const Tensor& v_g, const Tensor& p, const Tensor& do_h,
                         Tensor& dq_h, Tensor& ds_h, float scale, int64_t r0, int64_t r1) {
  const int64_t seq = p.size(0), rows = r1 - r0;
  // dP = dO[r0:r1] V[0:r1]^T  ([rows, HS] x [HS, r1]), then dS in place
  Tensor ds = ds_h.slice(0, r0, rows).slice(1, 0, r1);
  gemm(Trans::kNo, Trans::kYes, 1.0f, do_h.slice(0, r0, rows), v_g.slice(0, 0, r1), 0.0f, ds);
  for (int64_t i = r0; i < r1; ++i) {
    softmax_backward_row(p.data() + i * seq, ds_h.data() + i * seq, i, r1);
  }
  // dQ[r0:r1] = scale dS K[0:r1]  ([rows, r1] x [r1, HS])
  Tensor dq = dq_h.slice(0, r0, rows);
  gemm(Trans::kNo, Trans::kNo, scale, ds, k_g.slice(0, 0, r1), 0.0f, dq);
}

// Backward pass 2, keys [c0, c1) (a query block's rows, so pass 1 wrote every
// dS entry read here) of one (sequence, query head): adds the head's share of
// dK[c0:c1] and dV[c0:c1], zeroed first for the group's first head. Only
// queries [c0, T) see these keys.
void backward_key_rows(const Tensor& q_h, const Tensor& p, const Tensor& do_h, const Tensor& ds_h,
                       Tensor& dk_g, Tensor& dv_g, float scale, int64_t c0, int64_t c1,
                       bool first) {
  const int64_t seq = p.size(0), keys = c1 - c0, rows = seq - c0;
  Tensor dk = dk_g.slice(0, c0, keys), dv = dv_g.slice(0, c0, keys);
  if (first) {
    dk.zero();
    dv.zero();
  }
  // dV[c0:c1] += P[c0:T, c0:c1]^T dO[c0:T]  ([keys, rows] x [rows, HS])
  gemm(Trans::kYes, Trans::kNo, 1.0f, p.slice(0, c0, rows).slice(1, c0, keys),
       do_h.slice(0, c0, rows), 1.0f, dv);
  // dK[c0:c1] += scale dS[c0:T, c0:c1]^T Q[c0:T]  ([keys, rows] x [rows, HS])
  gemm(Trans::kYes, Trans::kNo, scale, ds_h.slice(0, c0, rows).slice(1, c0, keys),
       q_h.slice(0, c0, rows), 1.0f, dk);
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                       Tensor& probs, Tensor& out) {
  const AttentionDims d = check_attention(q, k, v, probs, out, "attention_forward");
  check_window(window, "attention_forward");
  const float scale = softmax_scale(d.head_dim);
  const Tensor p_all = probs.view({d.batch * d.n_head * d.seq, d.seq});
  const int64_t units = d.batch * d.n_head, blocks = ceil_div(d.seq, kQueryBlock);
  const int64_t tasks = units * blocks;
  const int64_t work = units * d.seq * d.seq * d.head_dim;
  // Later query blocks cost more (they see more keys): hand them out first.
#pragma omp parallel for schedule(dynamic) if (tasks > 1 && work > kParallelWork)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t blk = blocks - 1 - task / units, u = task % units;
    const int64_t b = u / d.n_head, h = u % d.n_head, g = h / d.group;
    const int64_t r0 = blk * kQueryBlock, r1 = std::min(d.seq, r0 + kQueryBlock);
    Tensor p = p_all.slice(0, u * d.seq, d.seq);  // [T, T]
    Tensor o_h = head(out, d, b, h);
    forward_rows(head(q, d, b, h), head(k, d, b, g), head(v, d, b, g), p, o_h, scale, window, r0,
                 r1);
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
  const int64_t blocks = ceil_div(d.seq, kQueryBlock);
  const int64_t q_units = d.batch * d.n_head, slabs = scratch.size(0);
  const int64_t work = d.batch * d.n_head * d.seq * d.seq * d.head_dim;
  const bool parallel = q_units * blocks > 1 && work > kParallelWork;
  // The KV unit (sequence, KV head) of query unit u.
  auto kv_unit = [&](int64_t u) { return u / d.n_head * d.n_kv_head + u % d.n_head / d.group; };
  for (int64_t u0 = 0; u0 < q_units; u0 += slabs) {
    const int64_t u1 = std::min(q_units, u0 + slabs), n_q = u1 - u0;
    const int64_t kv0 = kv_unit(u0), n_kv = kv_unit(u1 - 1) + 1 - kv0;
#pragma omp parallel if (parallel)
    {
      // Pass 1 (dS, dQ): later query blocks cost more, so they go first.
#pragma omp for schedule(dynamic)
      for (int64_t task = 0; task < n_q * blocks; ++task) {
        const int64_t blk = blocks - 1 - task / n_q, u = u0 + task % n_q;
        const int64_t b = u / d.n_head, h = u % d.n_head, g = h / d.group;
        const int64_t r0 = blk * kQueryBlock, r1 = std::min(d.seq, r0 + kQueryBlock);
        const Tensor p = p_all.slice(0, u * d.seq, d.seq);
        Tensor ds_h = ds_all.slice(0, (u - u0) * d.seq, d.seq);
        Tensor dq_h = head(dq, d, b, h);
        backward_query_rows(head(k, d, b, g), head(v, d, b, g), p, head(dout, d, b, h), dq_h, ds_h,
                            scale, r0, r1);
      }
      // Pass 2 (dK, dV), after the barrier: early key blocks are seen by more
      // queries, so they go first. A KV head's query heads add in head order
      // (a group split over two chunks continues in the next one).
#pragma omp for schedule(dynamic)
      for (int64_t task = 0; task < n_kv * blocks; ++task) {
        const int64_t blk = task / n_kv, kvu = kv0 + task % n_kv;
        const int64_t b = kvu / d.n_kv_head, g = kvu % d.n_kv_head;
        const int64_t c0 = blk * kQueryBlock, c1 = std::min(d.seq, c0 + kQueryBlock);
        Tensor dk_g = head(dk, d, b, g), dv_g = head(dv, d, b, g);
        const int64_t first_u = b * d.n_head + g * d.group;
        for (int64_t u = std::max(u0, first_u); u < std::min(u1, first_u + d.group); ++u) {
          const int64_t h = u % d.n_head;
          const Tensor p = p_all.slice(0, u * d.seq, d.seq);
          const Tensor ds_h = ds_all.slice(0, (u - u0) * d.seq, d.seq);
          backward_key_rows(head(q, d, b, h), p, head(dout, d, b, h), ds_h, dk_g, dv_g, scale, c0,
                            c1, u == first_u);
        }
      }
    }
  }
}

}  // namespace colrow::kernels::cpu
