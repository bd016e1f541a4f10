// ColumnParallelLinear (Megatron's ColumnParallelLinear): Y = X W^T + b with W
// split by output rows, W_local = W[r*out/tp : (r+1)*out/tp, :], bias likewise.
//   forward:  x: [tokens, in] (replicated) -> y_local: [tokens, out/tp]
//             (or y: [tokens, out] with gather_output: one all-gather)
//   backward: dy -> dx: [tokens, in], a partial sum on each rank until the
//             [f bwd] all-reduce over tp makes it whole.
#pragma once

#include "colrow/dist/communicator.h"
#include "colrow/nn/linear_spec.h"
#include "colrow/nn/parameter.h"

namespace colrow {

class ColumnParallelLinear {
 public:
  // Throws ConfigError (before allocating) unless out_features % tp == 0.
  ColumnParallelLinear(Communicator& tp, const LinearSpec& spec, bool gather_output = false);

  // x must stay unchanged until backward (it is read for the weight gradient).
  const Tensor& forward(const Tensor& x);
  // Accumulates weight/bias gradients; returns dx after the all-reduce over tp.
  const Tensor& backward(const Tensor& dy);
  // The same, minus the all-reduce: writes (accumulate=false) or adds
  // (accumulate=true) this layer's partial dx into dx. For a caller that feeds
  // one input to several column-parallel layers and reduces their sum once.
  void backward_partial(const Tensor& dy, Tensor& dx, bool accumulate);

  // The last forward's result (what forward returned).
  const Tensor& output() const { return gather_output_ ? y_full_ : y_local_; }
  Parameter& weight() { return weight_; }
  Parameter* bias() { return bias_ ? &*bias_ : nullptr; }
  int64_t out_features_local() const { return out_features_local_; }
  const LinearSpec& spec() const { return spec_; }

 private:
  Communicator& tp_;
  LinearSpec spec_;
  bool gather_output_;
  int64_t out_features_local_;
  Parameter weight_;               // [out/tp, in]
  std::optional<Parameter> bias_;  // [out/tp]
  Tensor x_;                       // forward input, kept for dW
  Tensor y_local_;                 // [tokens, out/tp]
  Tensor y_full_;                  // [tokens, out] when gathering
  Tensor dy_local_;                // [tokens, out/tp] when gathering
  Tensor dx_;                      // [tokens, in]
};

}  // namespace colrow
