// Shape checks of the KV-cache kernels, shared by kernels/cpu/kv_cache.cpp and
// kernels/cuda/kv_cache.cu. Legend: B sequences in the step, n new tokens
// each, S cache slots, L cache capacity (positions), NH query heads, NKV
// key/value heads, HS head_dim.
//   x (a new k or v): [B*n, NKV*HS]   cache: [S, NKV, L, HS], contiguous
//   q, out: [B*n, NH*HS]              scores: [B*n, NH, L], contiguous
// 2-d operands may be strided views with a contiguous last dim. The cache,
// x, q and out share one dtype, fp32 or bf16 (a bf16 cache holds half the
// bytes; the kernels read it natively); scores are fp32.
#pragma once

#include <cstdint>
#include <string>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"
#include "kernels/backend.h"
#include "kernels/checks/attention.h"
#include "kernels/elements.h"

namespace colrow::kernels {

struct CacheDims {
  int64_t batch, n_new, slots, n_kv_head, capacity, head_dim;
};

[[noreturn]] inline void kv_cache_fail(const char* what, const std::string& detail) {
  throw InternalError(std::string("[kv_cache] ") + what + ": " + detail);
}

// The cache's dimensions, and that every sequence's rows fit in it.
inline CacheDims check_cache_rows(const Tensor& cache, const CacheRows& rows, const char* what) {
  if (cache.ndim() != 4 || !cache.is_contiguous() || cache.numel() == 0) {
    kv_cache_fail(what,
                  "cache must be a non-empty contiguous [slots, n_kv_head, capacity, head_dim], "
                  "got " +
                      shape_to_string(cache.shape()));
  }
  const CacheDims d{static_cast<int64_t>(rows.slots.size()),
                    rows.n_new,
                    cache.size(0),
                    cache.size(1),
                    cache.size(2),
                    cache.size(3)};
  if (d.batch < 1 || d.n_new < 1 || rows.starts.size() != rows.slots.size()) {
    kv_cache_fail(what, std::to_string(rows.slots.size()) + " slots, " +
                            std::to_string(rows.starts.size()) + " starts and n_new " +
                            std::to_string(rows.n_new) + ": need one start per slot, both >= 1");
  }
  for (int64_t b = 0; b < d.batch; ++b) {
    if (rows.slots[b] < 0 || rows.slots[b] >= d.slots || rows.starts[b] < 0 ||
        rows.starts[b] + d.n_new > d.capacity) {
      kv_cache_fail(what, "sequence " + std::to_string(b) + ": slot " +
                              std::to_string(rows.slots[b]) + ", positions [" +
                              std::to_string(rows.starts[b]) + ", " +
                              std::to_string(rows.starts[b] + d.n_new) + ") do not fit cache " +
                              shape_to_string(cache.shape()));
    }
  }
  return d;
}

inline CacheDims check_kv_cache_append(const Tensor& x, const CacheRows& rows, const Tensor& cache,
                                       const char* what) {
  const CacheDims d = check_cache_rows(cache, rows, what);
  if (!is_attention_matrix(x, d.batch * d.n_new, d.n_kv_head * d.head_dim)) {
    kv_cache_fail(
        what, "x " + shape_to_string(x.shape()) + " must be [" + std::to_string(d.batch * d.n_new) +
                  ", " + std::to_string(d.n_kv_head * d.head_dim) + "] with a contiguous last dim");
  }
  shared_dtype(what, {&x, &cache});
  return d;
}

// The cache's dimensions; the query heads through `n_head`.
inline CacheDims check_cached_attention(const Tensor& q, const Tensor& k_cache,
                                        const Tensor& v_cache, const CacheRows& rows,
                                        const Tensor& scores, const Tensor& out, int64_t& n_head,
                                        const char* what) {
  const CacheDims d = check_cache_rows(k_cache, rows, what);
  if (v_cache.shape() != k_cache.shape() || !v_cache.is_contiguous()) {
    kv_cache_fail(what, "v_cache " + shape_to_string(v_cache.shape()) + " must match k_cache " +
                            shape_to_string(k_cache.shape()));
  }
  const int64_t tokens = d.batch * d.n_new;
  n_head = q.ndim() == 2 ? q.size(1) / d.head_dim : 0;
  const bool ok = n_head >= 1 && q.size(1) == n_head * d.head_dim && n_head % d.n_kv_head == 0 &&
                  is_attention_matrix(q, tokens, q.size(1)) &&
                  is_attention_matrix(out, tokens, q.size(1)) && scores.ndim() == 3 &&
                  scores.is_contiguous() && scores.size(0) == tokens && scores.size(1) == n_head &&
                  scores.size(2) == d.capacity;
  if (!ok) {
    kv_cache_fail(what, "shapes do not match: q " + shape_to_string(q.shape()) + ", cache " +
                            shape_to_string(k_cache.shape()) + ", scores " +
                            shape_to_string(scores.shape()) + ", out " +
                            shape_to_string(out.shape()) +
                            " (q, out: [batch * n_new, n_head * head_dim], n_head a multiple of "
                            "the cache's n_kv_head; scores: [batch * n_new, n_head, capacity])");
  }
  shared_dtype(what, {&q, &k_cache, &v_cache, &out});
  if (scores.dtype() != DType::kF32) {
    kv_cache_fail(what, std::string("scores are ") + dtype_name(scores.dtype()) + ", not fp32");
  }
  return d;
}

}  // namespace colrow::kernels
