// Double-precision AdamW with clipping; see adamw_reference.h.
#include "support/adamw_reference.h"

#include <cmath>

namespace colrow::reference {

double adamw_step(AdamWTensors& s, const std::vector<std::vector<double>>& grads, int64_t t,
                  double lr, const AdamWHyper& h) {
  double squares = 0.0;
  for (const auto& g : grads) {
    for (double x : g) squares += x * x;
  }
  const double norm = std::sqrt(squares);
  const double clip =
      (h.grad_clip > 0.0 && norm + 1e-6 > h.grad_clip) ? h.grad_clip / (norm + 1e-6) : 1.0;
  const double c1 = 1.0 - std::pow(h.beta1, static_cast<double>(t));
  const double c2 = 1.0 - std::pow(h.beta2, static_cast<double>(t));
  for (size_t i = 0; i < grads.size(); ++i) {
    for (size_t j = 0; j < grads[i].size(); ++j) {
      const double g = grads[i][j] * clip;
      double& p = s.params[i][j];
      double& m = s.m[i][j];
      double& v = s.v[i][j];
      if (s.decay[i]) p -= lr * h.weight_decay * p;
      m = h.beta1 * m + (1.0 - h.beta1) * g;
      v = h.beta2 * v + (1.0 - h.beta2) * g * g;
      const double m_hat = m / c1;
      const double v_hat = v / c2;
      p -= lr * m_hat / (std::sqrt(v_hat) + h.eps);
    }
  }
  return norm;
}

}  // namespace colrow::reference
