// Launches of the KV cache kernels on the GPU (kv_cache.h); the kernels,
// and how they sum, are in kv_cache_kernels.cuh.
#include "kernels/cuda/kv_cache.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/kv_cache.h"
#include "kernels/cuda/kept_buffers.h"
#include "kernels/cuda/kv_cache_kernels.cuh"
#include "kernels/cuda/operands.h"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {
namespace {

using kv_cache_kernels::kAttentionThreads;
using kv_cache_kernels::kThreads;
using kv_cache_kernels::SequencePlace;

const SequencePlace* upload_places(const CacheRows& rows, int device) {
  return upload_kept_table(device, "kv_cache.places", kv_cache_kernels::places_of(rows));
}

}  // namespace

void kv_cache_append(const Tensor& x, const CacheRows& rows, Tensor& cache) {
  const char* what = "kv_cache_append";
  const CacheDims d = check_kv_cache_append(x, rows, cache, what);
  const int device = cuda_device_of(what, {&x, &cache});
  const int64_t tokens = d.batch * d.n_new, width = d.n_kv_head * d.head_dim;
  const SequencePlace* places = upload_places(rows, device);
  with_elements(x, [&](const auto* source) {
    using E = element_of<decltype(source)>;
    kv_cache_kernels::append_rows<<<colrow::cuda::blocks_for(tokens * width, kThreads), kThreads, 0,
                                    colrow::cuda::compute_stream(device)>>>(
        source, x.row_stride(), places, tokens, d.n_new, d.n_kv_head, d.capacity, d.head_dim,
        static_cast<E*>(cache.raw_data()));
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

void cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const CacheRows& rows, int64_t window, Tensor& scores, Tensor& out) {
  const char* what = "cached_attention";
  int64_t n_head = 0;
  const CacheDims d = check_cached_attention(q, k_cache, v_cache, rows, scores, out, n_head, what);
  check_window(window, what);
  const int device = cuda_device_of(what, {&q, &k_cache, &v_cache, &scores, &out});
  const SequencePlace* places = upload_places(rows, device);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_dim)));
  const int64_t blocks = d.batch * d.n_new * n_head;
  with_elements(q, [&](const auto* queries) {
    using E = element_of<decltype(queries)>;
    kv_cache_kernels::attend_cache<<<static_cast<unsigned int>(blocks), kAttentionThreads, 0,
                                     colrow::cuda::compute_stream(device)>>>(
        queries, q.row_stride(), static_cast<const E*>(k_cache.raw_data()),
        static_cast<const E*>(v_cache.raw_data()), places, d.n_new, n_head, d.n_kv_head, d.capacity,
        d.head_dim, window, scale, scores.data(), static_cast<E*>(out.raw_data()),
        out.row_stride());
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
