// The KV cache kernels on the GPU. Append: one thread per copied element.
// Attention: one block per (token, query head); its threads compute the
// scores over the cached positions [0, p], reduce the max and the sum of
// exponentials in shared memory, then each thread owns output features and
// sums over the positions in order, so results repeat bitwise from run to run.
// A bf16 cache (with bf16 q and out) is read natively, each element widened
// as read (core/bfloat16.h); out is rounded once from its fp32 value.
#include "kernels/cuda/kv_cache.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/attention_window.h"
#include "kernels/checks/kv_cache.h"
#include "kernels/cuda/kept_buffers.h"
#include "kernels/cuda/operands.h"
#include "kernels/cuda/reductions.cuh"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kAttentionThreads = 128;

// Where sequence b of the step sits in the cache (uploaded per call; the
// same places for every layer of one step: copied once).
struct SequencePlace {
  int64_t slot;
  int64_t start;
};

const SequencePlace* upload_places(const CacheRows& rows, int device) {
  std::vector<SequencePlace> places(rows.slots.size());
  for (size_t b = 0; b < places.size(); ++b) places[b] = {rows.slots[b], rows.starts[b]};
  return upload_kept_table(device, "kv_cache.places", places);
}

template <typename E>
__global__ void append_rows(const E* x, int64_t ld_x, const SequencePlace* places, int64_t tokens,
                            int64_t n_new, int64_t n_kv_head, int64_t capacity, int64_t head_dim,
                            E* cache) {
  const int64_t width = n_kv_head * head_dim;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= tokens * width) return;
  const int64_t t = idx / width, c = idx % width, g = c / head_dim, j = c % head_dim;
  const SequencePlace place = places[t / n_new];
  const int64_t position = place.start + t % n_new;
  cache[((place.slot * n_kv_head + g) * capacity + position) * head_dim + j] = x[t * ld_x + c];
}

// Block (t, h): query head h of token t against its sequence's cached keys.
template <typename E>
__global__ void attend_cache(const E* q, int64_t ld_q, const E* k_cache, const E* v_cache,
                             const SequencePlace* places, int64_t n_new, int64_t n_head,
                             int64_t n_kv_head, int64_t capacity, int64_t head_dim, int64_t window,
                             float scale, float* scores, E* out, int64_t ld_out) {
  __shared__ float shared[kAttentionThreads / kWarp];
  const int64_t t = blockIdx.x / n_head, h = blockIdx.x % n_head;
  const int64_t g = h / (n_head / n_kv_head);
  const SequencePlace place = places[t / n_new];
  const int64_t last = place.start + t % n_new;  // keys [first, last]
  const int64_t first = first_visible_key(last, window);
  const int64_t head = (place.slot * n_kv_head + g) * capacity;
  const E* q_row = q + t * ld_q + h * head_dim;
  float* s = scores + (t * n_head + h) * capacity;
  float max = -INFINITY;
  for (int64_t j = first + threadIdx.x; j <= last; j += blockDim.x) {
    const E* k = k_cache + (head + j) * head_dim;
    float dot = 0.0f;
    for (int64_t c = 0; c < head_dim; ++c) dot += widen(q_row[c]) * widen(k[c]);
    s[j] = dot * scale;
    max = fmaxf(max, s[j]);
  }
  max = block_max(max, shared);
  float sum = 0.0f;
  for (int64_t j = first + threadIdx.x; j <= last; j += blockDim.x) {
    s[j] = expf(s[j] - max);
    sum += s[j];
  }
  sum = block_sum(sum, shared);  // also orders the writes to s before the reads below
  const float inv = 1.0f / sum;
  for (int64_t c = threadIdx.x; c < head_dim; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = first; j <= last; ++j) acc += s[j] * widen(v_cache[(head + j) * head_dim + c]);
    out[t * ld_out + h * head_dim + c] = narrow<E>(acc * inv);
  }
  __syncthreads();
  // The probabilities over [0, last], zeros for the window's masked keys and
  // for the step's later positions (kernels/cpu/kv_cache.h's contract).
  const int64_t step_end = place.start + n_new;
  for (int64_t j = threadIdx.x; j < step_end; j += blockDim.x) {
    s[j] = j >= first && j <= last ? s[j] * inv : 0.0f;
  }
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
    append_rows<<<colrow::cuda::blocks_for(tokens * width, kThreads), kThreads, 0,
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
    attend_cache<<<static_cast<unsigned int>(blocks), kAttentionThreads, 0,
                   colrow::cuda::compute_stream(device)>>>(
        queries, q.row_stride(), static_cast<const E*>(k_cache.raw_data()),
        static_cast<const E*>(v_cache.raw_data()), places, d.n_new, n_head, d.n_kv_head, d.capacity,
        d.head_dim, window, scale, scores.data(), static_cast<E*>(out.raw_data()),
        out.row_stride());
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
