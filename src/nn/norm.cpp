// The family's normalization.
#include "colrow/nn/norm.h"

namespace colrow {

Norm::Norm(const ModelConfig& config, const std::string& name, uint64_t seed) {
  const float eps = static_cast<float>(config.norm_eps);
  if (config.family == ModelFamily::kGpt2) {
    layer_ = std::make_unique<LayerNorm>(name, config.d_model, eps, seed);
  } else {
    rms_ = std::make_unique<RMSNorm>(name, config.d_model, eps, seed);
  }
}

}  // namespace colrow
