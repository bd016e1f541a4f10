// The kernels of the vocabulary-parallel cross-entropy on the GPU
// (cross_entropy.h; launched by cross_entropy.cu). A host compiler takes
// this header too: tests/kernels/cuda/cross_entropy_test runs these kernels
// on the CPU through the warp emulation as well as on a GPU.
//
// The row passes (partials, backward) run one block per token row; its threads
// stride over the row's real columns and combine through warp shuffles and
// then the warps in index order, so a row's result has the same bits every
// run. The forward pass reads each logit once: every thread keeps an online
// softmax state of its columns (running max, sum of exps rescaled in double
// when the max grows, raw sum of logits in double), and the block combines the
// threads' states rescaled to the row's max, in double, as the CPU combines
// its chunks. The combine of the ranks' partials runs one thread per token, in
// rank order. The loss sum is taken on the host over the copied losses, in
// token order, exactly as the CPU does it. exp is CUDA's expf (within 2 ulp;
// the CPU's vectorized exp is within 1.5 ulp and flushes e^z to 0 below z =
// -87), so sums and gradients agree with the CPU to a few ulp, not bit for
// bit. Logits of either dtype are read natively (E: float or bf16 bits,
// widened as read, core/bfloat16.h); a bf16 gradient is each fp32 one rounded
// once. A row that starts on 16 bytes is read (and its gradient written) 16
// bytes per thread at a time (kernels/cuda/vectors.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "colrow/core/bfloat16.h"
#include "kernels/cross_entropy_combine.h"
#include "kernels/cuda/reductions.cuh"
#include "kernels/cuda/shared_memory.cuh"
#include "kernels/cuda/vectors.cuh"

namespace colrow::kernels::cuda::cross_entropy_kernels {

constexpr int kThreads = 256;  // per token row
constexpr int kWarps = kThreads / kWarp;
constexpr int kLossThreads = 256;

// fn(values, count) over the columns [0, n) of `row`: thread k takes the
// groups of kGroup columns k, k + kThreads, ... (count = kGroup, or what is
// left at the row's end), whatever E and the row's alignment, so a row's sums
// have the same bits for fp32 and bf16 logits, aligned or not. A whole group
// of a row that starts on 16 bytes is read 16 bytes at a time (one load of
// bf16, two of fp32), element by element otherwise.
constexpr int kGroup = 8;
template <typename E, typename Fn>
__device__ inline void for_each_chunk_in_row(const E* row, int64_t n, Fn&& fn) {
  constexpr int V = kPerVector<E>;
  static_assert(kGroup % V == 0, "a group is whole vectors");
  const bool vectors = aligned_16(row);
  for (int64_t g = threadIdx.x * int64_t{kGroup}; g < n; g += int64_t{kThreads} * kGroup) {
    const int count = n - g < kGroup ? static_cast<int>(n - g) : kGroup;
    float group[kGroup];
    if (vectors && count == kGroup) {
#pragma unroll
      for (int h = 0; h < kGroup; h += V) {
        float chunk[V];
        load_chunk<V>(row + g + h, chunk);
#pragma unroll
        for (int i = 0; i < V; ++i) group[h + i] = chunk[i];
      }
    } else {
#pragma unroll
      for (int i = 0; i < kGroup; ++i) group[i] = i < count ? widen(row[g + i]) : 0.0f;
    }
    fn(group, count);
  }
}

// The online softmax state of the columns one thread has read: their max,
// sum exp(x - max) in double, rescaled in double whenever a group raises the
// max (once per group, not per column: fewer branches and double exps), and
// with label smoothing the raw sum of the logits in double, over n columns.
// exp(-inf) adds nothing; a NaN logit makes the sum of exps NaN (the max
// skips it, as fmaxf does).
struct OnlineRow {
  float max = -INFINITY;
  double sum_exp = 0.0, sum_x = 0.0;
  int64_t n = 0;
  // The first `count` of a group's kGroup values (the loops unroll over the
  // whole group, so that it stays in registers).
  __device__ void add(const float (&v)[kGroup], int count, bool smoothing) {
    float group_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      if (i < count) group_max = fmaxf(group_max, v[i]);
    }
    if (group_max > max) {
      sum_exp *= exp(static_cast<double>(max) - group_max);  // exp(-inf) = 0 at first
      max = group_max;
    }
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      if (i >= count) break;
      if (v[i] != -INFINITY) sum_exp += static_cast<double>(expf(v[i] - max));
      if (smoothing) sum_x += v[i];
    }
    n += count;
  }
  // sum (x - m) over my columns for a row max m >= max: -inf where every
  // column is -inf (not the NaN of -inf - -inf), 0 without columns.
  __device__ double sum_shifted(float m) const {
    if (n == 0) return 0.0;
    if (m == -INFINITY) return -INFINITY;
    return sum_x - static_cast<double>(n) * m;
  }
};

// One block per row t: partials[t] = {m_r, sum_j exp(x_j - m_r), x_target
// where this rank owns it (else 0), sum_j (x_j - m_r) with smoothing (else
// 0)} over the real columns; zeros on ignored rows (kernels/cpu/cross_entropy.h).
template <typename E>
__global__ void partials_rows(const E* x, int64_t ld, const int32_t* targets, int32_t ignore,
                              int64_t vocab_start, int64_t real, bool smoothing, float* partials) {
  COLROW_BLOCK_SHARED(float, shared_max, [kWarps]);
  COLROW_BLOCK_SHARED(double, shared_sum, [kWarps]);
  const int64_t t = blockIdx.x;
  float* out = partials + t * kCrossEntropyPartials;
  if (targets[t] == ignore) {  // the whole block leaves together
    if (threadIdx.x < kCrossEntropyPartials) out[threadIdx.x] = 0.0f;
    return;
  }
  const E* row = x + t * ld;
  OnlineRow mine;
  for_each_chunk_in_row(row, real,
                        [&](const float(&v)[kGroup], int count) { mine.add(v, count, smoothing); });
  const float m = block_max(mine.max, shared_max);
  // My sum taken to the row's max; a thread without mass adds its 0 (or NaN).
  const double scaled =
      mine.max == -INFINITY ? mine.sum_exp : mine.sum_exp * exp(static_cast<double>(mine.max) - m);
  const double s = block_sum(scaled, shared_sum);
  double sx = 0.0;
  if (smoothing) sx = block_sum(mine.sum_shifted(m), shared_sum);  // uniform over the block
  if (threadIdx.x == 0) {
    const int64_t target = static_cast<int64_t>(targets[t]) - vocab_start;
    out[0] = m;
    out[1] = static_cast<float>(s);
    out[2] = target >= 0 && target < real ? widen(row[target]) : 0.0f;
    out[3] = smoothing ? static_cast<float>(sx) : 0.0f;
  }
}

// One thread per token: the ranks' partials combined in rank order
// (kernels/cross_entropy_combine.h, the CPU's rule).
__global__ void combine_rows(const float* gathered, const int32_t* targets, int32_t ignore,
                             int64_t tokens, int64_t ranks, int64_t vocab_size,
                             int64_t vocab_size_local, float label_smoothing, float* max,
                             float* sum_exp, float* losses) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= tokens) return;
  const CombinedToken c = combine_token(gathered, tokens, t, ranks, targets[t] == ignore,
                                        vocab_size, vocab_size_local, label_smoothing);
  max[t] = c.max;
  sum_exp[t] = c.sum_exp;
  losses[t] = c.loss;
}

// One block per row t: dx_j = scale (exp(x_j - m) / S - a/V) - scale (1 - a) [j = target]
// for real columns, 0 on padded columns and ignored rows. dx may be x (the
// gradient in place): each element is read, then written, by one thread
// (16-byte accesses only where both rows start on 16 bytes, so that x's and
// dx's elements meet the same thread).
template <typename E>
__global__ void backward_rows(const E* x, int64_t ld, const int32_t* targets, int32_t ignore,
                              int64_t vocab_start, int64_t real, int64_t vocab_local,
                              const float* max, const float* sum_exp, const float* dloss,
                              float uniform_scale, float a_over_v, float one_minus_a, E* dx,
                              int64_t ld_dx) {
  const int64_t t = blockIdx.x;
  E* out = dx + t * ld_dx;
  if (targets[t] == ignore) {
    for (int64_t j = threadIdx.x; j < vocab_local; j += kThreads) out[j] = narrow<E>(0.0f);
    return;
  }
  const E* row = x + t * ld;
  const float scale = dloss != nullptr ? dloss[t] : uniform_scale;
  const float m = max[t], inv_sum = 1.0f / sum_exp[t];  // one division per row, as the CPU
  const int64_t mine = static_cast<int64_t>(targets[t]) - vocab_start;
  auto gradient = [&](int64_t j, float logit) {
    if (j >= real) return 0.0f;
    float g = scale * (expf(logit - m) * inv_sum - a_over_v);
    if (j == mine) g -= scale * one_minus_a;
    return g;
  };
  constexpr int V = kPerVector<E>;
  int64_t j0 = 0;
  if (aligned_16(row) && aligned_16(out)) {
    const int64_t vectors = vocab_local / V;
    for (int64_t v = threadIdx.x; v < vectors; v += kThreads) {
      float logits[V];
      load_chunk<V>(row + v * V, logits);
      alignas(16) E grads[V];
#pragma unroll
      for (int i = 0; i < V; ++i) grads[i] = narrow<E>(gradient(v * V + i, logits[i]));
      store_chunk<V>(out + v * V, grads);
    }
    j0 = vectors * V;
  }
  for (int64_t j = j0 + threadIdx.x; j < vocab_local; j += kThreads) {
    out[j] = narrow<E>(gradient(j, widen(row[j])));
  }
}

}  // namespace colrow::kernels::cuda::cross_entropy_kernels
