// AdamW's element-wise update over all of a rank's parameter segments, as
// torch.optim.AdamW's _single_tensor_adamw does it, element by element:
//   g = grad * grad_scale
//   p *= decay                                (decayed segments only)
//   m += (1 - beta1) (g - m)                  exp_avg.lerp_(grad, 1 - beta1)
//   v  = v beta2 + (1 - beta2) g^2            exp_avg_sq.mul_(beta2).addcmul_
//   p += -step_size * m / (sqrt(v) / bias_correction2_sqrt + eps)
//   compute = bf16(p)                         (segments with a compute copy)
// One call updates every segment (a GPU backend launches one kernel for all).
#pragma once

#include "kernels/backend.h"

namespace colrow::kernels::cpu {

void adamw_update(const std::vector<AdamWSegment>& segments, const AdamWStep& step);

}  // namespace colrow::kernels::cpu
