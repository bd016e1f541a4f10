// kernels/cuda/kv_cache.h's entry points on host tensors: the same checks,
// then the same kernels (kv_cache_kernels.cuh) with the same grids, run
// through the warp emulation (support/warp_emulation.h). The KV cache GPU
// test compiled with COLROW_WARP_EMULATION calls these.
#pragma once

#include <cstdint>

#include "colrow/core/cache_rows.h"
#include "colrow/core/tensor.h"

namespace colrow::testing::emulated {

void kv_cache_append(const Tensor& x, const CacheRows& rows, Tensor& cache);
void cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const CacheRows& rows, int64_t window, Tensor& scores, Tensor& out);

}  // namespace colrow::testing::emulated
