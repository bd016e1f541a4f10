// The launches of kernels/cuda/kv_cache.cu, on the host through the warp
// emulation: the sequences' places read where they are (the GPU uploads
// them); the append's threads never meet (launch_independent), the
// attention's reduce through shared memory (launch).
#include "support/warp_emulation.h"
// After the emulation, which the kernels' header then uses.
#include "kernels/cuda/kv_cache_kernels.cuh"

#include <cmath>
#include <vector>

#include "kernels/checks/attention.h"
#include "kernels/checks/kv_cache.h"
#include "kernels/cuda/emulated/kv_cache.h"
#include "kernels/cuda/emulated/launches.h"
#include "kernels/elements.h"

namespace colrow::testing::emulated {

namespace kv = kernels::cuda::kv_cache_kernels;
using kernels::element_of;

void kv_cache_append(const Tensor& x, const CacheRows& rows, Tensor& cache) {
  const char* what = "kv_cache_append";
  const kernels::CacheDims d = kernels::check_kv_cache_append(x, rows, cache, what);
  require_host(what, {&x, &cache});
  const int64_t tokens = d.batch * d.n_new, width = d.n_kv_head * d.head_dim;
  const std::vector<kv::SequencePlace> places = kv::places_of(rows);
  kernels::with_elements(x, [&](const auto* source) {
    using E = element_of<decltype(source)>;
    over_elements(tokens * width, kv::kThreads, [&] {
      kv::append_rows(source, x.row_stride(), places.data(), tokens, d.n_new, d.n_kv_head,
                      d.capacity, d.head_dim, static_cast<E*>(cache.raw_data()));
    });
  });
}

void cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const CacheRows& rows, int64_t window, Tensor& scores, Tensor& out) {
  const char* what = "cached_attention";
  int64_t n_head = 0;
  const kernels::CacheDims d =
      kernels::check_cached_attention(q, k_cache, v_cache, rows, scores, out, n_head, what);
  kernels::check_window(window, what);
  require_host(what, {&q, &k_cache, &v_cache, &scores, &out});
  const std::vector<kv::SequencePlace> places = kv::places_of(rows);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_dim)));
  const int64_t blocks = d.batch * d.n_new * n_head;
  kernels::with_elements(q, [&](const auto* queries) {
    using E = element_of<decltype(queries)>;
    emulation::launch(static_cast<unsigned int>(blocks), kv::kAttentionThreads, 0, [&] {
      kv::attend_cache(queries, q.row_stride(), static_cast<const E*>(k_cache.raw_data()),
                       static_cast<const E*>(v_cache.raw_data()), places.data(), d.n_new, n_head,
                       d.n_kv_head, d.capacity, d.head_dim, window, scale, scores.data(),
                       static_cast<E*>(out.raw_data()), out.row_stride());
    });
  });
}

}  // namespace colrow::testing::emulated
