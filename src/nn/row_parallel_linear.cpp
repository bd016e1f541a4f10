// RowParallelLinear: input features split over tp.
// Collectives: forward one all-reduce of y over tp ([g fwd]); backward none
// (one all-gather of dx when the layer scattered its input itself).
#include "colrow/nn/row_parallel_linear.h"

#include "colrow/core/error.h"
#include "colrow/dist/mappings.h"
#include "kernels/ops.h"

namespace colrow {
namespace {

using ops::Trans;

const LinearSpec& validated(const LinearSpec& spec, int tp) {
  require_divisible("row_parallel_linear", spec.name + ".in_features", spec.in_features, tp);
  return spec;
}

}  // namespace

RowParallelLinear::RowParallelLinear(Communicator& tp, const LinearSpec& spec,
                                     bool input_is_parallel)
    : tp_(tp),
      spec_(validated(spec, tp.size())),
      input_is_parallel_(input_is_parallel),
      in_features_local_(spec.in_features / tp.size()),
      weight_(spec.name + ".weight",
              ShardSpec{{spec.out_features, spec.in_features}, /*dim=*/1, tp.rank(), tp.size()},
              spec.resolved_weight_init(), spec.seed) {
  if (spec.bias) {
    bias_.emplace(spec.name + ".bias", ShardSpec::replicated({spec.out_features}),
                  spec.resolved_bias_init(), spec.seed);
  }
}

const Tensor& RowParallelLinear::forward(const Tensor& x) {
  const int64_t tokens = x.size(0);
  if (input_is_parallel_) {
    x_local_ = x;  // x: [tokens, in/tp], already sharded by a column-parallel layer
  } else {
    ensure_shape(x_local_, {tokens, in_features_local_}, weight_.value.device());
    scatter_to_tp_forward(x, x_local_, tp_);  // x: [tokens, in] -> my slice, no communication
  }
  // partial y = x_local W_local^T  ([tokens, in/tp] x [in/tp, out])
  ensure_shape(y_, {tokens, spec_.out_features}, weight_.value.device());
  ops::gemm(Trans::kNo, Trans::kYes, 1.0f, x_local_, weight_.value, 0.0f, y_);
  tp_.all_reduce_sum(y_);                      // [g fwd] all-reduce partial outputs over tp
  if (bias_) ops::add_bias(y_, bias_->value);  // once, after the sum
  return y_;
}

const Tensor& RowParallelLinear::backward(const Tensor& dy) {
  // [g bwd] identity: dy is replicated over tp
  // dW_local += dy^T x_local  ([out, tokens] x [tokens, in/tp])
  ops::gemm(Trans::kYes, Trans::kNo, 1.0f, dy, x_local_, 1.0f, weight_.grad);
  // The bias is replicated and dy is too: every rank gets the same full db.
  if (bias_) ops::accumulate_bias_grad(dy, bias_->grad);
  // dx_local = dy W_local  ([tokens, out] x [out, in/tp])
  ensure_shape(dx_local_, {dy.size(0), in_features_local_}, weight_.value.device());
  ops::gemm(Trans::kNo, Trans::kNo, 1.0f, dy, weight_.value, 0.0f, dx_local_);
  if (input_is_parallel_) return dx_local_;
  ensure_shape(dx_full_, {dy.size(0), spec_.in_features}, weight_.value.device());
  scatter_to_tp_backward(dx_local_, dx_full_, tp_);  // all-gather of the last dim over tp
  return dx_full_;
}

}  // namespace colrow
