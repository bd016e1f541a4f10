// AdamW's element-wise update over every segment (see adamw.h).
#include "kernels/cpu/adamw.h"

#include <cmath>

#include "colrow/core/bfloat16.h"
#include "kernels/checks/adamw.h"
#include "kernels/cpu/parallel.h"

namespace colrow::kernels::cpu {

void adamw_update(const std::vector<AdamWSegment>& segments, const AdamWStep& s) {
  const float one_minus_beta1 = 1.0f - s.beta1, one_minus_beta2 = 1.0f - s.beta2;
  struct Arrays {
    float* p;
    const float* g;
    float *m, *v;
    uint16_t* c;  // the bf16 compute copy, or null
    float wd;
  };
  std::vector<Arrays> arrays;
  std::vector<int64_t> lengths;
  for (const AdamWSegment& segment : segments) {
    const int64_t n = segment.param.numel();
    check_adamw_segment(segment);
    // Shallow handles onto the segment's storage (the list is const, its storage is not).
    Tensor param = segment.param, exp_avg = segment.exp_avg, exp_avg_sq = segment.exp_avg_sq;
    Tensor compute = segment.compute;
    arrays.push_back({param.data(), segment.grad.data(), exp_avg.data(), exp_avg_sq.data(),
                      compute.owns_storage() ? compute.bf16_data() : nullptr,
                      segment.decay ? s.decay : 1.0f});
    lengths.push_back(n);
  }
  // One parallel loop over fixed chunks of every segment: small segments (biases,
  // norms) share the threads instead of running alone. Element-wise, so the
  // split changes no bits.
  const std::vector<Chunk> chunks = fixed_chunks(lengths);
  const int64_t n_chunks = static_cast<int64_t>(chunks.size());
  int64_t total = 0;
  for (int64_t n : lengths) total += n;
#pragma omp parallel for schedule(static) if (total > kParallelElements)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const auto [p, g, m, v, copy, wd] = arrays[chunks[c].part];
    for (int64_t j = chunks[c].begin; j < chunks[c].end; ++j) {
      const float grad = g[j] * s.grad_scale;
      p[j] *= wd;                                             // param.mul_(1 - lr * wd)
      m[j] += one_minus_beta1 * (grad - m[j]);                // exp_avg.lerp_(grad, 1 - beta1)
      v[j] = v[j] * s.beta2 + one_minus_beta2 * grad * grad;  // mul_(beta2).addcmul_
      const float denom = std::sqrt(v[j]) / s.bias_correction2_sqrt + s.eps;
      p[j] += -s.step_size * (m[j] / denom);  // addcdiv_(m, denom, -step_size)
    }
    if (copy != nullptr) {  // the chunk's params are still in cache
#pragma omp simd
      for (int64_t j = chunks[c].begin; j < chunks[c].end; ++j) copy[j] = float_to_bf16(p[j]);
    }
  }
}

}  // namespace colrow::kernels::cpu
