// The CUDA twin of kernels/cpu/kv_cache.h: the KV cache append and attention
// of new queries against the cache. Shapes, layouts and formulas are
// documented there. Every tensor lives on one GPU; work is queued on its
// compute stream.
#pragma once

#include "colrow/core/tensor.h"
#include "kernels/backend.h"

namespace colrow::kernels::cuda {

void kv_cache_append(const Tensor& x, const CacheRows& rows, Tensor& cache);

void cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const CacheRows& rows, int64_t window, Tensor& scores, Tensor& out);

}  // namespace colrow::kernels::cuda
