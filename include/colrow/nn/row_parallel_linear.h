// RowParallelLinear (Megatron's RowParallelLinear): Y = X W^T + b with W split
// by input columns, W_local = W[:, r*in/tp : (r+1)*in/tp]; the bias is
// replicated and added once, after the all-reduce (else it would count tp times).
//   forward:  x_local: [tokens, in/tp] -> partial [tokens, out] -> all-reduce -> + b
//             (input_is_parallel = false: x: [tokens, in], the layer keeps its slice)
//   backward: dy: [tokens, out] (replicated) -> dx_local: [tokens, in/tp], no
//             communication (or one all-gather back to [tokens, in]).
#pragma once

#include "colrow/dist/communicator.h"
#include "colrow/nn/linear_spec.h"
#include "colrow/nn/parameter.h"

namespace colrow {

class RowParallelLinear {
 public:
  // Throws ConfigError (before allocating) unless in_features % tp == 0.
  RowParallelLinear(Communicator& tp, const LinearSpec& spec, bool input_is_parallel = true);

  // x must stay unchanged until backward (it is read for the weight gradient).
  const Tensor& forward(const Tensor& x);
  // Accumulates weight/bias gradients; returns dx (sharded or, when the layer
  // scattered its input, gathered back to the full width).
  const Tensor& backward(const Tensor& dy);

  Parameter& weight() { return weight_; }
  Parameter* bias() { return bias_ ? &*bias_ : nullptr; }
  int64_t in_features_local() const { return in_features_local_; }
  const LinearSpec& spec() const { return spec_; }

 private:
  Communicator& tp_;
  LinearSpec spec_;
  bool input_is_parallel_;
  int64_t in_features_local_;
  Parameter weight_;               // [out, in/tp]
  std::optional<Parameter> bias_;  // [out], replicated
  Tensor x_local_;                 // [tokens, in/tp]: the input (or my slice of it)
  Tensor y_;                       // [tokens, out]
  Tensor dx_local_;                // [tokens, in/tp]
  Tensor dx_full_;                 // [tokens, in] when the input was scattered
};

}  // namespace colrow
