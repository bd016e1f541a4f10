// The KV cache kernels on the GPU (kv_cache.h; launched by kv_cache.cu).
// Append: one thread per copied element.
// Attention: one block per (token, query head); its threads compute the
// scores over the visible cached positions [first, p] (the sliding window's
// first; 0 without one), reduce the max and the sum of exponentials in shared
// memory, then each thread owns output features and sums over the positions
// in order, so results repeat bitwise from run to run.
// A bf16 cache (with bf16 q and out) is read natively, each element widened
// as read (core/bfloat16.h); out is rounded once from its fp32 value.
// A host compiler takes this header too: tests/kernels/cuda/kv_cache_test
// runs these kernels on the CPU through the warp emulation as well as on a
// GPU.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/cache_rows.h"
#include "core/cuda/cuda_context.h"
#include "kernels/attention_window.h"
#include "kernels/cuda/reductions.cuh"
#include "kernels/cuda/shared_memory.cuh"

namespace colrow::kernels::cuda::kv_cache_kernels {

constexpr int kThreads = 256;
constexpr int kAttentionThreads = 128;

// Where sequence b of the step sits in the cache (uploaded per call; the
// same places for every layer of one step: copied once).
struct SequencePlace {
  int64_t slot;
  int64_t start;
};

inline std::vector<SequencePlace> places_of(const CacheRows& rows) {
  std::vector<SequencePlace> places(rows.slots.size());
  for (size_t b = 0; b < places.size(); ++b) places[b] = {rows.slots[b], rows.starts[b]};
  return places;
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
  COLROW_BLOCK_SHARED(float, shared, [kAttentionThreads / kWarp]);
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

}  // namespace colrow::kernels::cuda::kv_cache_kernels
