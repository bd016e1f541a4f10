// AdamW's element-wise update over every segment (see adamw.h).
#include "kernels/cpu/adamw.h"

#include <cmath>

#include "colrow/core/error.h"
#include "kernels/cpu/parallel.h"

namespace colrow::kernels::cpu {

void adamw_update(const std::vector<AdamWSegment>& segments, const AdamWStep& s) {
  const float one_minus_beta1 = 1.0f - s.beta1, one_minus_beta2 = 1.0f - s.beta2;
  for (const AdamWSegment& segment : segments) {
    const int64_t n = segment.param.numel();
    for (const Tensor* t : {&segment.param, &segment.grad, &segment.exp_avg, &segment.exp_avg_sq}) {
      if (!t->is_contiguous() || t->numel() != n) {
        throw InternalError("[adamw] a segment's param, grad and moments must be contiguous "
                            "and of one length (" + std::to_string(n) + ")");
      }
    }
    // Shallow handles onto the segment's storage (the list is const, its storage is not).
    Tensor param = segment.param, exp_avg = segment.exp_avg, exp_avg_sq = segment.exp_avg_sq;
    float* p = param.data();
    const float* g = segment.grad.data();
    float* m = exp_avg.data();
    float* v = exp_avg_sq.data();
    const float wd = segment.decay ? s.decay : 1.0f;
#pragma omp parallel for schedule(static) if (n > kParallelElements)
    for (int64_t j = 0; j < n; ++j) {
      const float grad = g[j] * s.grad_scale;
      p[j] *= wd;                                             // param.mul_(1 - lr * wd)
      m[j] += one_minus_beta1 * (grad - m[j]);                // exp_avg.lerp_(grad, 1 - beta1)
      v[j] = v[j] * s.beta2 + one_minus_beta2 * grad * grad;  // mul_(beta2).addcmul_
      const float denom = std::sqrt(v[j]) / s.bias_correction2_sqrt + s.eps;
      p[j] += -s.step_size * (m[j] / denom);  // addcdiv_(m, denom, -step_size)
    }
  }
}

}  // namespace colrow::kernels::cpu
