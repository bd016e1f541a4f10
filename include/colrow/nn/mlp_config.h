// The MLP's shape and options (MlpConfig) and their checks, apart from the
// layer (parallel_mlp.h), so that parsing flags needs no kernels.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "colrow/nn/parameter.h"  // Init

namespace colrow {

// kGelu: GELU's tanh form (GPT-2's gelu_new); kGeluErf: the exact form.
enum class Activation { kGelu, kGeluErf, kSwiGlu };

const char* to_string(Activation activation);
// "gelu", "gelu-erf" or "swiglu"; anything else is a ConfigError listing them.
Activation parse_activation(const std::string& text);

struct MlpConfig {
  std::string name = "mlp";  // parameter-name prefix
  int64_t d_model = 0;
  int64_t ffn_hidden_size = 0;
  Activation activation = Activation::kGelu;
  bool bias = true;
  uint64_t seed = 0;
  // Unset: nn.Linear's default (linear_spec.h). output_init: the down
  // projection's weight, which writes into the residual stream.
  std::optional<Init> weight_init;
  std::optional<Init> bias_init;
  std::optional<Init> output_init;
  // Megatron's sequence parallelism: x and y are this rank's block of tokens
  // (all-gathered on entry, reduce-scattered on exit; tp_region_input.h).
  bool sequence_parallel = false;
  // Sum dx over tp while the weight gradients compute (tp_region_input.h);
  // false waits for each collective where it starts.
  bool overlap_backward = true;
};

// Pure, identical on every rank, before any allocation: sizes positive and
// ffn_hidden_size divisible by tp (ConfigError naming the field and valid tp).
void validate(const MlpConfig& config, int tp);

}  // namespace colrow
