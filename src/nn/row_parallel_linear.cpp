// RowParallelLinear: input features split over tp.
// Collectives: forward one all-reduce of y over tp ([g fwd]); backward none
// (one all-gather of dx when the layer scattered its input itself). With
// sequence parallelism a reduce-scatter forward and an all-gather backward.
#include "colrow/nn/row_parallel_linear.h"

#include "colrow/core/error.h"
#include "colrow/dist/mappings.h"
#include "colrow/nn/shared_buffer.h"
#include "colrow/nn/tp_region_input.h"
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
                                     bool input_is_parallel, bool sequence_parallel)
    : tp_(tp),
      spec_(validated(spec, tp.size())),
      input_is_parallel_(input_is_parallel),
      sequence_parallel_(sequence_parallel),
      in_features_local_(spec.in_features / tp.size()),
      weight_(spec.name + ".weight",
              ShardSpec{{spec.out_features, spec.in_features}, /*dim=*/1, tp.rank(), tp.size()},
              spec.resolved_weight_init(), spec.seed) {
  if (spec.bias) {
    bias_.emplace(spec.name + ".bias", ShardSpec::replicated({spec.out_features}),
                  spec.resolved_bias_init(), spec.seed);
    bias_->sequence_parallel = sequence_parallel;  // added to token blocks: partial gradients
  }
}

const Tensor& RowParallelLinear::forward(const Tensor& x) {
  const int64_t tokens = x.size(0);
  if (input_is_parallel_) {
    x_local_ = x;  // x: [tokens, in/tp], already sharded by a column-parallel layer
  } else {
    ensure_shape(x_local_, {tokens, in_features_local_}, weight_.value.device(), x.dtype());
    scatter_to_tp_forward(x, x_local_, tp_);  // x: [tokens, in] -> my slice, no communication
  }
  // partial y = x_local W_local^T  ([tokens, in/tp] x [in/tp, out])
  const Device device = weight_.value.device();
  if (sequence_parallel_) {
    require_tokens_divisible(tokens, tp_.size(), "row_parallel_linear");
    // Summed into my token block at once: one partial-output buffer serves every layer.
    Tensor& partial = shared_buffer("row_parallel.partial_output", {tokens, spec_.out_features},
                                    device, x.dtype());
    ops::gemm(Trans::kNo, Trans::kYes, 1.0f, x_local_, weight_.compute(), 0.0f, partial);
    layer_buffer(y_local_, shared_buffers_, "row_parallel.y_block",
                 {tokens / tp_.size(), spec_.out_features}, device, x.dtype());
    reduce_scatter_to_sp_forward(partial, y_local_, tp_);  // sum, keep my token block
    if (bias_) ops::add_bias(y_local_, bias_->compute());
    return y_local_;
  }
  layer_buffer(y_, shared_buffers_, "row_parallel.y", {tokens, spec_.out_features}, device,
               x.dtype());
  if (bias_ && tp_.size() == 1) {
    // No other rank's partial to wait for: the bias goes into the GEMM (its
    // epilogue on a GPU; in bf16 one rounding of the fp32 sum plus the bias).
    ops::linear_forward(x_local_, weight_.compute(), bias_->compute(), y_);
    tp_.all_reduce_sum(y_);  // [g fwd] nothing to add; kept so every tp runs the same collectives
    return y_;
  }
  ops::gemm(Trans::kNo, Trans::kYes, 1.0f, x_local_, weight_.compute(), 0.0f, y_);
  tp_.all_reduce_sum(y_);                          // [g fwd] all-reduce partial outputs over tp
  if (bias_) ops::add_bias(y_, bias_->compute());  // once, after the sum
  return y_;
}

const Tensor& RowParallelLinear::backward(const Tensor& dy) {
  return backward_impl(dy, nullptr);
}

const Tensor& RowParallelLinear::backward_impl(const Tensor& dy_given,
                                               const Tensor* pre_activation) {
  // The bias saw only this rank's tokens under sequence parallelism: its
  // gradient is partial, summed over tp by the model (Parameter::sequence_parallel).
  // Otherwise it is taken with the weight gradient below, from the same dy.
  if (bias_ && sequence_parallel_) ops::accumulate_bias_grad(dy_given, bias_->grad);
  const Tensor* dy_ptr = &dy_given;
  if (sequence_parallel_) {
    // Used within this call only: one buffer serves every layer.
    Tensor& dy_full = shared_buffer("row_parallel.gathered_grad",
                                    {dy_given.size(0) * tp_.size(), spec_.out_features},
                                    dy_given.device(), dy_given.dtype());
    reduce_scatter_to_sp_backward(dy_given, dy_full, tp_);  // all-gather dy's token blocks
    dy_ptr = &dy_full;
  }
  const Tensor& dy = *dy_ptr;
  // [g bwd] identity: dy is replicated over tp
  // dW_local += dy^T x_local  ([out, tokens] x [tokens, in/tp])
  if (bias_ && !sequence_parallel_) {
    ops::linear_weight_grads(dy, x_local_, weight_.grad, bias_->grad);
  } else {
    ops::gemm(Trans::kYes, Trans::kNo, 1.0f, dy, x_local_, 1.0f, weight_.grad);
  }
  // dx_local = dy W_local  ([tokens, out] x [out, in/tp])
  layer_buffer(dx_local_, shared_buffers_, "row_parallel.dx", {dy.size(0), in_features_local_},
               weight_.value.device(), dy.dtype());
  if (pre_activation != nullptr) {
    // d pre_activation = gelu'(pre_activation) * (dy W_local), the GEMM's epilogue where fused
    ops::gelu_input_grad(dy, weight_.compute(), *pre_activation, dx_local_);
    return dx_local_;  // the input is parallel (checked by the caller)
  }
  ops::gemm(Trans::kNo, Trans::kNo, 1.0f, dy, weight_.compute(), 0.0f, dx_local_);
  if (input_is_parallel_) return dx_local_;
  layer_buffer(dx_full_, shared_buffers_, "row_parallel.dx_full", {dy.size(0), spec_.in_features},
               weight_.value.device(), dy.dtype());
  scatter_to_tp_backward(dx_local_, dx_full_, tp_);  // all-gather of the last dim over tp
  return dx_full_;
}

void RowParallelLinear::require_parallel_input(const Tensor& x) const {
  if (!input_is_parallel_ || x.shape() != x_local_.shape()) {
    throw InternalError("[row_parallel_linear] " + spec_.name + ": backward's x " +
                        shape_to_string(x.shape()) + " must be the parallel input forward saw (" +
                        shape_to_string(x_local_.shape()) + ")");
  }
}

const Tensor& RowParallelLinear::backward(const Tensor& dy, const Tensor& x) {
  require_parallel_input(x);
  x_local_ = x;
  return backward_impl(dy, nullptr);
}

const Tensor& RowParallelLinear::backward_through_gelu(const Tensor& dy, const Tensor& x,
                                                       const Tensor& pre_activation) {
  require_parallel_input(x);
  x_local_ = x;
  return backward_impl(dy, &pre_activation);
}

}  // namespace colrow
