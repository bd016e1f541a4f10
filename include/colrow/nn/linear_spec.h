// LinearSpec: what a linear layer is, independent of how it is split.
// Weight [out_features, in_features] (nn.Linear's layout), optional bias.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "colrow/nn/parameter.h"

namespace colrow {

struct LinearSpec {
  std::string name;  // prefix of the parameter names: name + ".weight", name + ".bias"
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool bias = true;
  uint64_t seed = 0;
  // Defaults to Init::linear_default(in_features) for weight and bias, as
  // PyTorch's nn.Linear does (fan-in is the full input size at every tp).
  std::optional<Init> weight_init;
  std::optional<Init> bias_init;

  Init resolved_weight_init() const {
    return weight_init.value_or(Init::linear_default(in_features));
  }
  Init resolved_bias_init() const { return bias_init.value_or(Init::linear_default(in_features)); }
};

}  // namespace colrow
