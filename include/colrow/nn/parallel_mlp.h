// ParallelMLP (Megatron's ParallelMLP): column-parallel up-projection ->
// activation on the local hidden units -> row-parallel down-projection.
//   gelu:   c_fc [ffn, d] -> GELU (tanh form, or erf) -> c_proj [d, ffn] (GPT-2)
//   swiglu: gate_proj, up_proj [ffn, d] -> silu(gate) * up -> down_proj (LLaMA)
// gate and up are split over the same hidden units, so the product is local,
// and run as one fused projection (nn/fused_column_parallel_linear.h,
// Megatron's linear_fc1 of a gated MLP): one GEMM each way, gate's columns
// then up's in its output, the checkpoint keeping both names.
//   x: [tokens, d_model] (replicated) -> y: [tokens, d_model] (replicated)
// Collectives: one all-reduce forward (in down/c_proj, [g fwd]) and one
// backward (of dx, [f bwd]) whatever the activation.
#pragma once

#include "colrow/dist/communicator.h"
#include "colrow/nn/column_parallel_linear.h"
#include "colrow/nn/fused_column_parallel_linear.h"
#include "colrow/nn/mlp_config.h"
#include "colrow/nn/row_parallel_linear.h"
#include "colrow/nn/tp_region_input.h"

namespace colrow {

class ParallelMLP {
 public:
  ParallelMLP(Communicator& tp, const MlpConfig& config);

  // x: [tokens, d_model] (sequence parallel: this rank's [tokens/tp, d_model])
  // -> y, the same shape. x must stay unchanged until backward.
  const Tensor& forward(const Tensor& x);
  // Accumulates every parameter gradient; returns dx, the shape of x.
  const Tensor& backward(const Tensor& dy);
  // Its transient tensors (the output, the hidden units' gradients, dx) from
  // now on live in buffers every layer shares (nn/shared_buffer.h:
  // layer_buffer): what forward and backward return is then valid until the
  // next layer's call.
  void share_buffers();
  // Backward makes the hidden units again from the up projection's output
  // (and the gate's), which it reads anyway, instead of forward keeping them:
  // llm.c's recompute=1, and what torch.compile's partitioner does with
  // pointwise ops. With shared buffers the hidden units then live in one
  // buffer every layer shares, a [tokens, ffn/tp] tensor per layer less for
  // one more activation pass. The same bits either way.
  void set_recompute_activation(bool recompute) { recompute_activation_ = recompute; }
  // MlpConfig::overlap_backward, changed after construction.
  void set_overlap_backward(bool overlap) { input_.set_overlap(overlap); }

  std::vector<Parameter*> parameters();
  const MlpConfig& config() const { return config_; }
  // 2 * tokens * d_model * ffn_hidden_size per projection, unsharded.
  double forward_flops(int64_t tokens) const;

 private:
  // hidden_ = activation(up's output), GELU's or SwiGLU's.
  void activate();
  bool hidden_is_shared() const { return shared_buffers_ && recompute_activation_; }
  // The up projection's output: [tokens, ffn/tp] (swiglu: [tokens, 2 ffn/tp], gate then up).
  const Tensor& up_output() const { return gate_up_ ? gate_up_->output() : up_->output(); }
  // [tokens, ffn/tp] for the up projection's output `up`.
  Shape hidden_shape(const Tensor& up) const;

  MlpConfig config_;
  TpRegionInput input_;
  // gelu: up_ = c_fc. swiglu: gate_up_ = gate_proj and up_proj, fused.
  std::optional<ColumnParallelLinear> up_;
  std::optional<FusedColumnParallelLinear> gate_up_;
  RowParallelLinear down_;  // c_proj, down_proj
  Tensor hidden_;  // [tokens, ffn/tp]: activation output, input of down_ (recomputed: shared)
  Tensor d_up_;    // [tokens, ffn/tp] (swiglu: [tokens, 2 ffn/tp], d_gate then d_up)
  bool shared_buffers_ = false;
  bool recompute_activation_ = false;
};

}  // namespace colrow
