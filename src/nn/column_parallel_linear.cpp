// ColumnParallelLinear: output features split over tp.
// Collectives: forward none (all-gather with gather_output); backward one
// all-reduce of dx over tp ([f bwd]), overlapping the weight-gradient GEMM.
#include "colrow/nn/column_parallel_linear.h"

#include "colrow/core/error.h"
#include "colrow/dist/mappings.h"
#include "kernels/ops.h"

namespace colrow {
namespace {

using ops::Trans;

const LinearSpec& validated(const LinearSpec& spec, int tp, OutputBlock block) {
  validate_output_block(spec, tp, block);
  return spec;
}

}  // namespace

ShardSpec output_rows(const Shape& full, OutputBlock block) {
  return {full, /*dim=*/0, block.index, block.count};
}

void validate_output_block(const LinearSpec& spec, int tp, OutputBlock block) {
  if (block.count == tp) {
    require_divisible("column_parallel_linear", spec.name + ".out_features", spec.out_features, tp);
  } else if (block.count < 1 || spec.out_features % block.count != 0) {
    throw ConfigError("[column_parallel_linear] " + spec.name + ".out_features (" +
                      std::to_string(spec.out_features) +
                      ") must be divisible by the block count (" + std::to_string(block.count) +
                      ").");
  }
}

ColumnParallelLinear::ColumnParallelLinear(Communicator& tp, const LinearSpec& spec,
                                           bool gather_output)
    : ColumnParallelLinear(tp, spec, gather_output, OutputBlock{tp.rank(), tp.size()}) {}

ColumnParallelLinear::ColumnParallelLinear(Communicator& tp, const LinearSpec& spec,
                                           OutputBlock block)
    : ColumnParallelLinear(tp, spec, /*gather_output=*/false, block) {}

ColumnParallelLinear::ColumnParallelLinear(Communicator& tp, const LinearSpec& spec,
                                           bool gather_output, OutputBlock block)
    : tp_(tp),
      spec_(validated(spec, tp.size(), block)),
      gather_output_(gather_output),
      out_features_local_(spec.out_features / block.count),
      weight_(spec.name + ".weight", output_rows({spec.out_features, spec.in_features}, block),
              spec.resolved_weight_init(), spec.seed) {
  if (spec.bias) {
    bias_.emplace(spec.name + ".bias", output_rows({spec.out_features}, block),
                  spec.resolved_bias_init(), spec.seed);
  }
}

const Tensor& ColumnParallelLinear::forward(const Tensor& x) {
  // x: [tokens, in] -> y_local: [tokens, out/tp]
  // [f fwd] identity: x is replicated over tp
  x_ = x;
  const int64_t tokens = x.size(0);
  ensure_shape(y_local_, {tokens, out_features_local_}, weight_.value.device(), x.dtype());
  if (bias_) {  // y_local = x W_local^T + b_local, the bias in the GEMM's epilogue where fused
    ops::linear_forward(x, weight_.compute(), bias_->compute(), y_local_);
  } else {
    ops::gemm(Trans::kNo, Trans::kYes, 1.0f, x, weight_.compute(), 0.0f, y_local_);
  }
  if (!gather_output_) return y_local_;
  ensure_shape(y_full_, {tokens, spec_.out_features}, weight_.value.device(), x.dtype());
  gather_from_tp_forward(y_local_, y_full_, tp_);  // all-gather of the last dim over tp
  return y_full_;
}

const Tensor& ColumnParallelLinear::forward_gelu(const Tensor& x, Tensor& activation) {
  if (gather_output_) {
    throw InternalError("[column_parallel_linear] " + spec_.name +
                        ": forward_gelu keeps the output split; the layer gathers it");
  }
  x_ = x;
  ensure_shape(y_local_, {x.size(0), out_features_local_}, weight_.value.device(), x.dtype());
  ops::linear_gelu_forward(x, weight_.compute(), bias_ ? &bias_->compute() : nullptr, y_local_,
                           activation);
  return activation;
}

const Tensor& ColumnParallelLinear::local_grad(const Tensor& dy) {
  if (!gather_output_) return dy;
  // dy: [tokens, out] -> my columns [tokens, out/tp] (gather's backward: no communication)
  ensure_shape(dy_local_, {dy.size(0), out_features_local_}, weight_.value.device(), dy.dtype());
  gather_from_tp_backward(dy, dy_local_, tp_);
  return dy_local_;
}

void ColumnParallelLinear::backward_input(const Tensor& dy, Tensor& dx, bool accumulate) {
  // dx (partial over tp) = dy_local W_local  ([tokens, out/tp] x [out/tp, in])
  ops::gemm(Trans::kNo, Trans::kNo, 1.0f, local_grad(dy), weight_.compute(),
            accumulate ? 1.0f : 0.0f, dx);
}

void ColumnParallelLinear::backward_weights(const Tensor& dy) {
  // With gather_output, backward_input left my columns of dy in dy_local_.
  const Tensor& dy_local = gather_output_ ? dy_local_ : dy;
  // dW_local += dy_local^T x  ([out/tp, tokens] x [tokens, in]), db_local += sum_t dy_local
  if (bias_) {
    ops::linear_weight_grads(dy_local, x_, weight_.grad, bias_->grad);
  } else {
    ops::gemm(Trans::kYes, Trans::kNo, 1.0f, dy_local, x_, 1.0f, weight_.grad);
  }
}

const Tensor& ColumnParallelLinear::backward(const Tensor& dy) {
  ensure_shape(dx_, x_.shape(), weight_.value.device(), x_.dtype());
  backward_input(dy, dx_, /*accumulate=*/false);
  // [f bwd] all-reduce partial input gradients over tp, while the weight gradients compute
  std::unique_ptr<PendingCollective> reducing = tp_.start_all_reduce_sum(dx_);
  backward_weights(dy);
  reducing->wait();
  return dx_;
}

}  // namespace colrow
