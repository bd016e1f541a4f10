// Plain double-precision AdamW (Loshchilov & Hutter; torch.optim.AdamW's
// formula) with gradient clipping by the global norm, on whole (unsharded)
// tensors. Independent of the library: no colrow header, no shared code.
#pragma once

#include <cstdint>
#include <vector>

namespace colrow::reference {

struct AdamWHyper {
  double beta1, beta2, eps, weight_decay, grad_clip;  // grad_clip <= 0: none
};

struct AdamWTensors {
  std::vector<std::vector<double>> params;  // one entry per tensor
  std::vector<std::vector<double>> m, v;    // moments, same shapes (start at 0)
  std::vector<bool> decay;                  // weight decay applies
};

// One step t (1-based) with rate lr on `grads` (already averaged over data
// parallel ranks). Returns the global L2 norm of grads before clipping.
double adamw_step(AdamWTensors& state, const std::vector<std::vector<double>>& grads, int64_t t,
                  double lr, const AdamWHyper& hyper);

}  // namespace colrow::reference
