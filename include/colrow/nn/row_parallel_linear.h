// RowParallelLinear (Megatron's RowParallelLinear): Y = X W^T + b with W split
// by input columns, W_local = W[:, r*in/tp : (r+1)*in/tp]; the bias is
// replicated and added once, after the all-reduce (else it would count tp times;
// at tp 1, with nothing to sum, it goes into the GEMM: ops::linear_forward).
//   forward:  x_local: [tokens, in/tp] -> partial [tokens, out] -> all-reduce -> + b
//             (input_is_parallel = false: x: [tokens, in], the layer keeps its slice)
//   backward: dy: [tokens, out] (replicated) -> dx_local: [tokens, in/tp], no
//             communication (or one all-gather back to [tokens, in]).
// With sequence parallelism the output is this rank's block of tokens: the
// all-reduce becomes a reduce-scatter over the token dim (+ b on the block),
// and backward first all-gathers dy's blocks (reduce_scatter_to_sp). The bias
// gradient is then partial over tp (this rank's tokens): the bias is marked
// sequence_parallel and the model sums it over tp.
#pragma once

#include "colrow/dist/communicator.h"
#include "colrow/nn/linear_spec.h"
#include "colrow/nn/parameter.h"

namespace colrow {

class RowParallelLinear {
 public:
  // Throws ConfigError (before allocating) unless in_features % tp == 0.
  RowParallelLinear(Communicator& tp, const LinearSpec& spec, bool input_is_parallel = true,
                    bool sequence_parallel = false);

  // x must stay unchanged until backward (it is read for the weight gradient).
  const Tensor& forward(const Tensor& x);
  // Accumulates weight/bias gradients; returns dx (sharded or, when the layer
  // scattered its input, gathered back to the full width). dy: the shape
  // forward returned.
  const Tensor& backward(const Tensor& dy);
  // The same, with the weight gradient reading `x`: forward's input again,
  // which its caller may have recomputed into another buffer (activation
  // recomputation). Only where the input is parallel (the layer kept x itself).
  const Tensor& backward(const Tensor& dy, const Tensor& x);
  // The same, through the tanh GELU that made x from `pre_activation` (the
  // column-parallel layer's output, [tokens, in/tp]): returns the gradient of
  // pre_activation, gelu_tanh'(pre_activation) * (dy W_local), in one GEMM
  // with the derivative in its epilogue where the backend fuses it
  // (ops::gelu_input_grad; cuBLASLt's DGELU in bf16).
  const Tensor& backward_through_gelu(const Tensor& dy, const Tensor& x,
                                      const Tensor& pre_activation);

  // Its output and dx from now on live in buffers every layer shares
  // (nn/shared_buffer.h: layer_buffer): valid until the next layer's call.
  void share_buffers() { shared_buffers_ = true; }

  Parameter& weight() { return weight_; }
  Parameter* bias() { return bias_ ? &*bias_ : nullptr; }
  int64_t in_features_local() const { return in_features_local_; }
  const LinearSpec& spec() const { return spec_; }

 private:
  // backward, through the GELU when pre_activation is given.
  const Tensor& backward_impl(const Tensor& dy, const Tensor* pre_activation);
  void require_parallel_input(const Tensor& x) const;

  Communicator& tp_;
  LinearSpec spec_;
  bool input_is_parallel_;
  bool sequence_parallel_;
  bool shared_buffers_ = false;
  int64_t in_features_local_;
  Parameter weight_;               // [out, in/tp]
  std::optional<Parameter> bias_;  // [out], replicated
  Tensor x_local_;                 // [tokens, in/tp]: the input (or my slice of it)
  Tensor y_;                       // [tokens, out] (not sequence parallel)
  Tensor y_local_;                 // [tokens/tp, out]: my token block (sequence parallel)
  Tensor dx_local_;                // [tokens, in/tp]
  Tensor dx_full_;                 // [tokens, in] when the input was scattered
};

}  // namespace colrow
