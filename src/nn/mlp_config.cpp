// MlpConfig's activation names and checks.
#include "colrow/nn/mlp_config.h"

#include "colrow/core/error.h"

namespace colrow {

const char* to_string(Activation activation) {
  switch (activation) {
    case Activation::kGeluErf:
      return "gelu-erf";
    case Activation::kSwiGlu:
      return "swiglu";
    case Activation::kGelu:
      break;
  }
  return "gelu";
}

Activation parse_activation(const std::string& text) {
  for (Activation a : {Activation::kGelu, Activation::kGeluErf, Activation::kSwiGlu}) {
    if (text == to_string(a)) return a;
  }
  throw ConfigError("[mlp] activation (" + text + ") must be one of {gelu, gelu-erf, swiglu}.");
}

void validate(const MlpConfig& config, int tp) {
  if (config.d_model < 1 || config.ffn_hidden_size < 1) {
    throw ConfigError("[mlp] d_model (" + std::to_string(config.d_model) +
                      ") and ffn_hidden_size (" + std::to_string(config.ffn_hidden_size) +
                      ") must be positive.");
  }
  require_divisible("mlp", "ffn_hidden_size", config.ffn_hidden_size, tp);
}

}  // namespace colrow
