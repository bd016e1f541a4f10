// AdamW's hyperparameter checks (adamw_config.h).
#include "colrow/train/adamw_config.h"

#include <string>

#include "colrow/core/error.h"

namespace colrow {

bool decays_matrices(const Parameter& p) {
  return p.shard.full_shape.size() >= 2;
}

void validate(const AdamWConfig& c) {
  auto in_unit = [](float beta) { return beta >= 0.0f && beta < 1.0f; };
  if (!in_unit(c.beta1)) {
    throw ConfigError("[adamw] beta1 (" + std::to_string(c.beta1) + ") must lie in [0, 1).");
  }
  if (!in_unit(c.beta2)) {
    throw ConfigError("[adamw] beta2 (" + std::to_string(c.beta2) + ") must lie in [0, 1).");
  }
  if (!(c.eps > 0.0f)) {
    throw ConfigError("[adamw] eps (" + std::to_string(c.eps) + ") must be > 0.");
  }
  if (!(c.weight_decay >= 0.0f)) {
    throw ConfigError("[adamw] weight_decay (" + std::to_string(c.weight_decay) +
                      ") must be >= 0.");
  }
  if (c.zero != 0 && c.zero != 1) {
    throw ConfigError("[adamw] zero (" + std::to_string(c.zero) +
                      ") must be 0 or 1. Use 1 to shard the optimizer state over dp.");
  }
  if (c.bucket_size < 0) {
    throw ConfigError("[adamw] bucket_size (" + std::to_string(c.bucket_size) +
                      ") must be >= 0 elements. Use 0 for one bucket of every gradient.");
  }
  if (!c.decays) throw ConfigError("[adamw] decays must be set. Use decays_matrices.");
}

}  // namespace colrow
