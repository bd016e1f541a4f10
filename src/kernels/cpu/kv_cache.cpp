// The KV cache kernels on the CPU: a row copy, and per (sequence, query head)
// two GEMMs around a causal softmax, like kernels/cpu/attention.cpp but with
// the keys read from the cache. Parallel over (sequence, query head, block of
// new query rows), so a prefill of one sequence still makes many tasks; each
// task writes its own rows, so the split changes no bits. Inside the OpenMP
// region OpenBLAS runs single-threaded. A bf16 cache is read natively: the
// scores' GEMM takes bf16 q and keys (a decode step's few rows read the keys
// in place, gemm.cpp), P V reads the values in place for a decode step's few
// rows (a prefill block widens the head's values for sgemm), and out is
// rounded once from its fp32 value: the fp32 kernel's numbers on the widened
// operands, up to the order of the fp32 sums.
#include "kernels/cpu/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "colrow/core/bfloat16.h"
#include "kernels/attention_window.h"
#include "kernels/checks/kv_cache.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/mixed_precision.h"

namespace colrow::kernels::cpu {
namespace {

// Query rows up to which a bf16 P V reads the cached values in place (below);
// more widen the head's values once for sgemm. Measured at up to 8 rows, as
// gemm.h's few-rows products were then.
constexpr int64_t kFewValueRows = 8;

// Scores for keys [0, last] of one query: the softmax of the visible ones,
// [first, last], zeros before and after.
void causal_softmax(float* row, int64_t first, int64_t last, int64_t end) {
  float max = row[first];
  for (int64_t j = first + 1; j <= last; ++j) max = std::max(max, row[j]);
  float sum = 0.0f;
  for (int64_t j = first; j <= last; ++j) {
    row[j] = std::exp(row[j] - max);
    sum += row[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = first; j <= last; ++j) row[j] *= inv;
  std::fill(row, row + first, 0.0f);
  std::fill(row + last + 1, row + end, 0.0f);
}

// o (bf16) = p (fp32) v (bf16) for a decoding step's few rows: each value
// read once in place and widened in registers (a widened copy of the head's
// values per step would cost more than the product), each sum in fp32 over
// the keys in order, rounded once. Columns in blocks of kColumns, so the sums
// live in registers, not in an allocation per call.
void bf16_probabilities_times_values(const Tensor& p, const Tensor& v, Tensor& o) {
  constexpr int64_t kColumns = 64;
  const int64_t rows = p.size(0), keys = p.size(1), hs = v.size(1);
  const int64_t ldp = p.row_stride(), ldv = v.row_stride(), ldo = o.row_stride();
  const float* probs = p.data();
  const uint16_t* values = v.bf16_data();
  uint16_t* out = o.bf16_data();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c0 = 0; c0 < hs; c0 += kColumns) {
      const int64_t width = std::min(kColumns, hs - c0);
      float sum[kColumns] = {};
      for (int64_t j = 0; j < keys; ++j) {
        const float pj = probs[r * ldp + j];
        const uint16_t* vj = values + j * ldv + c0;
#pragma omp simd
        for (int64_t c = 0; c < width; ++c) sum[c] += pj * widen(vj[c]);
      }
      for (int64_t c = 0; c < width; ++c) out[r * ldo + c0 + c] = float_to_bf16(sum[c]);
    }
  }
}

}  // namespace

void kv_cache_append(const Tensor& x, const CacheRows& rows, Tensor& cache) {
  const CacheDims d = check_kv_cache_append(x, rows, cache, "kv_cache_append");
  const int64_t tokens = d.batch * d.n_new, hs = d.head_dim;
  const auto element = static_cast<size_t>(dtype_bytes(x.dtype()));  // the cache's too
  const auto* source = static_cast<const std::byte*>(x.raw_data());
  auto* target = static_cast<std::byte*>(cache.raw_data());
#pragma omp parallel for schedule(static) if (tokens * d.n_kv_head * hs > kParallelElements)
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t b = t / d.n_new, i = t % d.n_new;
    const std::byte* src = source + t * x.stride(0) * element;
    for (int64_t g = 0; g < d.n_kv_head; ++g) {
      const int64_t row = (rows.slots[b] * d.n_kv_head + g) * d.capacity + rows.starts[b] + i;
      std::memcpy(target + row * hs * element, src + g * hs * element,
                  static_cast<size_t>(hs) * element);
    }
  }
}

void cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const CacheRows& rows, int64_t window, Tensor& scores, Tensor& out) {
  int64_t n_head = 0;
  const CacheDims d =
      check_cached_attention(q, k_cache, v_cache, rows, scores, out, n_head, "cached_attention");
  check_window(window, "cached_attention");
  const int64_t n = d.n_new, hs = d.head_dim, group = n_head / d.n_kv_head;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs)));
  // Row (t, h) of the scores as a [B*n, NH*L] matrix: head h of token t.
  const Tensor score_rows = scores.view({d.batch * n, n_head * d.capacity});
  const int64_t units = d.batch * n_head, blocks = ceil_div(n, kQueryBlock);
  const int64_t tasks = units * blocks;
  int64_t keys = 0;
  for (int64_t s : rows.starts) keys += s + n;
  const int64_t work = keys * n * n_head * hs;
  // Later query blocks see more keys: they go first.
#pragma omp parallel for schedule(dynamic) if (tasks > 1 && work > kParallelElements)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t blk = blocks - 1 - task / units, u = task % units;
    const int64_t b = u / n_head, h = u % n_head, g = h / group;
    const int64_t r0 = blk * kQueryBlock, r1 = std::min(n, r0 + kQueryBlock), m = r1 - r0;
    const int64_t start = rows.starts[b], end = start + n;  // the step's keys: [0, end)
    const int64_t seen = start + r1;                        // these rows' keys: [0, seen)
    const int64_t cache_head = (rows.slots[b] * d.n_kv_head + g) * d.capacity;
    const Tensor k =
        k_cache.view({d.slots * d.n_kv_head * d.capacity, hs}).slice(0, cache_head, seen);
    const Tensor v =
        v_cache.view({d.slots * d.n_kv_head * d.capacity, hs}).slice(0, cache_head, seen);
    const Tensor q_bh = q.slice(0, b * n + r0, m).slice(1, h * hs, hs);            // [m, HS]
    Tensor s = score_rows.slice(0, b * n + r0, m).slice(1, h * d.capacity, seen);  // [m, seen]
    // S = scale Q K^T  ([m, HS] x [HS, seen])
    gemm(Trans::kNo, Trans::kYes, scale, q_bh, k, 0.0f, s);
    for (int64_t i = r0; i < r1; ++i) {
      const int64_t last = start + i;  // zeros after it up to the step's end
      causal_softmax(s.data() + (i - r0) * s.stride(0), first_visible_key(last, window), last, end);
    }
    // O = P V  ([m, seen] x [seen, HS]); bf16: the values widened, O rounded once
    Tensor o = out.slice(0, b * n + r0, m).slice(1, h * hs, hs);
    if (o.dtype() == DType::kF32) {
      gemm(Trans::kNo, Trans::kNo, 1.0f, s, v, 0.0f, o);
    } else if (m <= kFewValueRows) {
      bf16_probabilities_times_values(s, v, o);
    } else {
      Tensor o_wide = Tensor::empty({m, hs});
      gemm(Trans::kNo, Trans::kNo, 1.0f, s, v.to(DType::kF32), 0.0f, o_wide);
      store_rounded(o_wide, o);
    }
  }
}

}  // namespace colrow::kernels::cpu
