// ParallelMLP (Megatron's ParallelMLP): column-parallel up-projection ->
// activation on the local hidden units -> row-parallel down-projection.
//   gelu:   c_fc [ffn, d] -> GELU (tanh form, or erf) -> c_proj [d, ffn] (GPT-2)
//   swiglu: gate_proj, up_proj [ffn, d] -> silu(gate) * up -> down_proj (LLaMA)
// gate and up are split over the same hidden units, so the product is local.
//   x: [tokens, d_model] (replicated) -> y: [tokens, d_model] (replicated)
// Collectives: one all-reduce forward (in down/c_proj, [g fwd]) and one
// backward (of dx, [f bwd]) whatever the activation.
#pragma once

#include <string>

#include "colrow/dist/communicator.h"
#include "colrow/nn/column_parallel_linear.h"
#include "colrow/nn/row_parallel_linear.h"
#include "colrow/nn/tp_region_input.h"

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

class ParallelMLP {
 public:
  ParallelMLP(Communicator& tp, const MlpConfig& config);

  // x: [tokens, d_model] (sequence parallel: this rank's [tokens/tp, d_model])
  // -> y, the same shape. x must stay unchanged until backward.
  const Tensor& forward(const Tensor& x);
  // Accumulates every parameter gradient; returns dx, the shape of x.
  const Tensor& backward(const Tensor& dy);

  std::vector<Parameter*> parameters();
  const MlpConfig& config() const { return config_; }
  // 2 * tokens * d_model * ffn_hidden_size per projection, unsharded.
  double forward_flops(int64_t tokens) const;

 private:
  MlpConfig config_;
  TpRegionInput input_;
  // gelu: up_ = c_fc, down_ = c_proj. swiglu: gate_, up_ = up_proj, down_ = down_proj.
  std::optional<ColumnParallelLinear> gate_;
  ColumnParallelLinear up_;
  RowParallelLinear down_;
  Tensor hidden_;  // [tokens, ffn/tp]: activation output, input of down_
  Tensor d_gate_;  // [tokens, ffn/tp]
  Tensor d_up_;    // [tokens, ffn/tp]
};

}  // namespace colrow
