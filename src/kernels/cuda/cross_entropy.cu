// Vocabulary-parallel cross-entropy pieces on the GPU. The row passes (max,
// sums, backward) run one block per token row; its threads stride over the
// row's real columns and combine through warp shuffles and then the warps in
// index order, so a row's result has the same bits every run. Sums of
// exponentials and of shifted logits accumulate in double, as on the CPU.
// The loss sum is taken on the host over the copied losses, in token order,
// exactly as the CPU does it. exp is CUDA's expf (within 2 ulp; the CPU's
// vectorized exp is within 1.5 ulp and flushes e^z to 0 below z = -87), so
// sums and gradients agree with the CPU to a few ulp, not bit for bit.
// Logits of either dtype are read natively (E: float or bf16 bits, widened
// as read, core/bfloat16.h); a bf16 gradient is each fp32 one rounded once.
// A row that starts on 16 bytes is read (and its gradient written) 16 bytes
// per thread at a time (kernels/cuda/vectors.cuh).
#include "kernels/cuda/cross_entropy.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "colrow/core/bfloat16.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/cross_entropy.h"
#include "kernels/cuda/kept_buffers.h"
#include "kernels/cuda/operands.h"
#include "kernels/cuda/reductions.cuh"
#include "kernels/cuda/vectors.cuh"
#include "kernels/elements.h"

namespace colrow::kernels::cuda {
namespace {

constexpr int kThreads = 256;  // per token row
constexpr int kWarps = kThreads / kWarp;
constexpr int kLossThreads = 256;

bool smoothing(const CrossEntropyRows& rows) {
  return rows.label_smoothing > 0.0f;
}

// fn(j, x_j) for j in [0, n) of `row`, each j by one thread of the block
// (always the same one for the same row and n): 16 bytes per load where the
// row starts on 16 bytes, one element at a time otherwise and for the tail.
template <typename E, typename Fn>
__device__ inline void for_each_in_row(const E* row, int64_t n, Fn&& fn) {
  constexpr int V = kPerVector<E>;
  int64_t j0 = 0;
  if (aligned_16(row)) {
    const int64_t vectors = n / V;
    for (int64_t v = threadIdx.x; v < vectors; v += kThreads) {
      float chunk[V];
      load_chunk<V>(row + v * V, chunk);
#pragma unroll
      for (int i = 0; i < V; ++i) fn(v * V + i, chunk[i]);
    }
    j0 = vectors * V;
  }
  for (int64_t j = j0 + threadIdx.x; j < n; j += kThreads) fn(j, widen(row[j]));
}

// One block per row t: max over the real columns (fmaxf skips NaN; -inf when
// real == 0), 0 on ignored rows.
template <typename E>
__global__ void local_max_rows(const E* x, int64_t ld, const int32_t* targets, int32_t ignore,
                               int64_t real, float* max) {
  __shared__ float shared[kWarps];
  const int64_t t = blockIdx.x;
  if (targets[t] == ignore) {  // the whole block leaves together
    if (threadIdx.x == 0) max[t] = 0.0f;
    return;
  }
  const E* row = x + t * ld;
  float m = -INFINITY;
  for_each_in_row(row, real, [&](int64_t, float v) { m = fmaxf(m, v); });
  m = block_max(m, shared);
  if (threadIdx.x == 0) max[t] = m;
}

// One block per row t: sum_exp = sum_j exp(x_j - m), target_logit[t, 0] =
// x_target - m where this rank owns the target, [t, 1] = sum_j (x_j - m) with
// smoothing (stride 2); zero on ignored rows.
template <typename E>
__global__ void sums_rows(const E* x, int64_t ld, const int32_t* targets, int32_t ignore,
                          int64_t vocab_start, int64_t real, const float* max, bool smoothing,
                          float* sum_exp, float* target_logit) {
  __shared__ double shared[kWarps];
  const int64_t t = blockIdx.x;
  const int64_t stride = smoothing ? 2 : 1;
  float* out = target_logit + t * stride;
  if (targets[t] == ignore) {
    if (threadIdx.x == 0) {
      sum_exp[t] = 0.0f;
      out[0] = 0.0f;
      if (smoothing) out[1] = 0.0f;
    }
    return;
  }
  const E* row = x + t * ld;
  const float m = max[t];
  double s = 0.0, sx = 0.0;
  if (m == -INFINITY) {
    // Every real logit of the row is -inf (m is the max over all ranks): no
    // mass, and sum_j (x_j - m) is -inf, not the NaN of -inf - -inf. As the CPU.
    if (real > 0) sx = -INFINITY;
  } else {
    for_each_in_row(row, real, [&](int64_t, float v) {
      const float z = v - m;
      s += static_cast<double>(expf(z));
      sx += static_cast<double>(z);
    });
    s = block_sum(s, shared);                   // `m` is uniform over the block,
    if (smoothing) sx = block_sum(sx, shared);  // and so is `smoothing`
  }
  if (threadIdx.x == 0) {
    sum_exp[t] = static_cast<float>(s);
    const int64_t mine = static_cast<int64_t>(targets[t]) - vocab_start;
    out[0] = mine >= 0 && mine < real ? widen(row[mine]) - m : 0.0f;
    if (smoothing) out[1] = static_cast<float>(sx);
  }
}

// One thread per row: loss = log S - (1 - a) target_logit[t, 0] - a/V target_logit[t, 1].
__global__ void loss_rows(const float* sum_exp, const float* target_logit, const int32_t* targets,
                          int32_t ignore, int64_t tokens, bool smoothing, double a, double a_over_v,
                          float* losses) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= tokens) return;
  if (targets[t] == ignore) {
    losses[t] = 0.0f;
    return;
  }
  const float* in = target_logit + t * (smoothing ? 2 : 1);
  double loss = log(static_cast<double>(sum_exp[t])) - (1.0 - a) * in[0];
  if (smoothing) loss -= a_over_v * in[1];
  losses[t] = static_cast<float>(loss);
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

}  // namespace

void stage_cross_entropy_targets(int device, const std::vector<int32_t>& targets) {
  if (!targets.empty()) upload_kept(device, "cross_entropy.targets", targets);
}

void cross_entropy_local_max(const Tensor& logits_local, const CrossEntropyRows& rows,
                             Tensor& max) {
  const int64_t tokens = check_cross_entropy_local_max(logits_local, rows, max);
  const int device = cuda_device_of("cross_entropy_local_max", {&logits_local, &max});
  if (tokens == 0) return;
  // The same targets for every piece of one loss: uploaded once.
  const int32_t* targets = upload_kept(device, "cross_entropy.targets", *rows.targets);
  with_elements(logits_local, [&](const auto* x) {
    local_max_rows<<<static_cast<unsigned int>(tokens), kThreads, 0,
                     colrow::cuda::compute_stream(device)>>>(
        x, logits_local.row_stride(), targets, rows.ignore_index, rows.real, max.data());
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

void cross_entropy_sums(const Tensor& logits_local, const CrossEntropyRows& rows, const Tensor& max,
                        Tensor& sum_exp, Tensor& target_logit) {
  const int64_t tokens = check_cross_entropy_sums(logits_local, rows, max, sum_exp, target_logit);
  const int device =
      cuda_device_of("cross_entropy_sums", {&logits_local, &max, &sum_exp, &target_logit});
  if (tokens == 0) return;
  const int32_t* targets = upload_kept(device, "cross_entropy.targets", *rows.targets);
  with_elements(logits_local, [&](const auto* x) {
    sums_rows<<<static_cast<unsigned int>(tokens), kThreads, 0,
                colrow::cuda::compute_stream(device)>>>(
        x, logits_local.row_stride(), targets, rows.ignore_index, rows.vocab_start, rows.real,
        max.data(), smoothing(rows), sum_exp.data(), target_logit.data());
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

void cross_entropy_loss(const Tensor& sum_exp, const Tensor& target_logit,
                        const CrossEntropyRows& rows, Tensor& losses) {
  const char* what = "cross_entropy_loss";
  const int64_t tokens = check_cross_entropy_loss(sum_exp, target_logit, rows, losses);
  if (tokens == 0) return;
  const int device = cuda_device_of(what, {&losses, &sum_exp, &target_logit});
  const bool smooth = smoothing(rows);
  const double a = rows.label_smoothing;
  const double a_over_v = smooth ? a / static_cast<double>(rows.vocab_size) : 0.0;
  const int32_t* targets = upload_kept(device, "cross_entropy.targets", *rows.targets);
  loss_rows<<<colrow::cuda::blocks_for(tokens, kLossThreads), kLossThreads, 0,
              colrow::cuda::compute_stream(device)>>>(sum_exp.data(), target_logit.data(), targets,
                                                      rows.ignore_index, tokens, smooth, a,
                                                      a_over_v, losses.data());
  COLROW_CUDA_CHECK_LAUNCH();
}

void cross_entropy_backward(const Tensor& logits_local, const CrossEntropyRows& rows,
                            const Tensor& max, const Tensor& sum_exp, const Tensor* dloss,
                            float uniform_scale, Tensor& dlogits_local) {
  const char* what = "cross_entropy_backward";
  const int64_t tokens = check_cross_entropy_backward(logits_local, rows, max, sum_exp, dloss);
  const int64_t vocab_local = logits_local.size(1);
  if (dlogits_local.ndim() != 2 || dlogits_local.size(0) != tokens ||
      dlogits_local.size(1) != vocab_local || (vocab_local > 1 && dlogits_local.stride(1) != 1)) {
    cross_entropy_fail(what, "dlogits_local " + shape_to_string(dlogits_local.shape()) +
                                 " must be like logits " + shape_to_string(logits_local.shape()) +
                                 " with contiguous rows");
  }
  check_cross_entropy_grad_dtype(what, logits_local, dlogits_local);
  const int device = cuda_device_of(what, {&logits_local, &max, &sum_exp, dloss, &dlogits_local});
  if (tokens == 0 || vocab_local == 0) return;
  const bool smooth = smoothing(rows);
  const float a = rows.label_smoothing;
  const float a_over_v =
      smooth ? static_cast<float>(static_cast<double>(a) / static_cast<double>(rows.vocab_size))
             : 0.0f;
  const int32_t* targets = upload_kept(device, "cross_entropy.targets", *rows.targets);
  with_elements(logits_local, [&](const auto* x) {
    using E = element_of<decltype(x)>;
    backward_rows<<<static_cast<unsigned int>(tokens), kThreads, 0,
                    colrow::cuda::compute_stream(device)>>>(
        x, logits_local.row_stride(), targets, rows.ignore_index, rows.vocab_start, rows.real,
        vocab_local, max.data(), sum_exp.data(), dloss != nullptr ? dloss->data() : nullptr,
        uniform_scale, a_over_v, 1.0f - a, static_cast<E*>(dlogits_local.raw_data()),
        dlogits_local.row_stride());
  });
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
