// FusedColumnParallelLinear: the parts' local rows stacked, one GEMM each way.
// Collectives: none (the caller sums dx over tp, as for ColumnParallelLinear's
// backward_input).
#include "colrow/nn/fused_column_parallel_linear.h"

#include "colrow/core/error.h"
#include "kernels/ops.h"

namespace colrow {
namespace {

using ops::Trans;

const std::vector<ColumnPart>& validated(const std::vector<ColumnPart>& parts, int tp) {
  if (parts.empty()) throw InternalError("[fused_column_parallel_linear] no parts");
  for (const ColumnPart& part : parts) {
    validate_output_block(part.spec, tp, part.block);
    if (part.spec.in_features != parts.front().spec.in_features ||
        part.spec.bias != parts.front().spec.bias) {
      throw InternalError("[fused_column_parallel_linear] " + part.spec.name + " and " +
                          parts.front().spec.name +
                          " differ in in_features or bias: fused parts read one input and "
                          "have a bias alike");
    }
  }
  return parts;
}

std::vector<Parameter*> pointers(std::vector<Parameter>& params) {
  std::vector<Parameter*> out;
  for (Parameter& p : params) out.push_back(&p);
  return out;
}

}  // namespace

FusedColumnParallelLinear::FusedColumnParallelLinear(Communicator& tp,
                                                     const std::vector<ColumnPart>& parts_given) {
  const std::vector<ColumnPart>& parts = validated(parts_given, tp.size());
  weights_.reserve(parts.size());  // the groups keep pointers: no reallocation
  biases_.reserve(parts.size());
  column_offsets_.push_back(0);
  for (const ColumnPart& part : parts) {
    const LinearSpec& spec = part.spec;
    // The same names, shards and draws as ColumnParallelLinear's, so fusing
    // changes neither the model nor its checkpoint.
    weights_.emplace_back(spec.name + ".weight",
                          output_rows({spec.out_features, spec.in_features}, part.block),
                          spec.resolved_weight_init(), spec.seed);
    if (spec.bias) {
      biases_.emplace_back(spec.name + ".bias", output_rows({spec.out_features}, part.block),
                           spec.resolved_bias_init(), spec.seed);
    }
    column_offsets_.push_back(column_offsets_.back() + spec.out_features / part.block.count);
  }
  weight_group_.emplace(pointers(weights_));
  if (!biases_.empty()) bias_group_.emplace(pointers(biases_));
}

const Tensor& FusedColumnParallelLinear::forward(const Tensor& x) {
  weight_group_->check_views("fused_column_parallel_linear forward");
  if (bias_group_) bias_group_->check_views("fused_column_parallel_linear forward");
  // x: [tokens, in] -> y: [tokens, sum of the parts' local columns]
  // [f fwd] identity: x is replicated over tp
  x_ = x;
  const Tensor& w = weight_group_->compute();
  ensure_shape(y_, {x.size(0), out_features_local()}, w.device(), x.dtype());
  if (bias_group_) {  // y = x W^T + b, the bias in the GEMM's epilogue where fused
    ops::linear_forward(x, w, bias_group_->compute(), y_);
  } else {
    ops::gemm(Trans::kNo, Trans::kYes, 1.0f, x, w, 0.0f, y_);
  }
  return y_;
}

Tensor FusedColumnParallelLinear::part(const Tensor& y, size_t i) const {
  if (i + 1 >= column_offsets_.size() || y.ndim() != 2 || y.size(1) != out_features_local()) {
    throw InternalError("[fused_column_parallel_linear] part " + std::to_string(i) + " of " +
                        shape_to_string(y.shape()) + ": " +
                        std::to_string(column_offsets_.size() - 1) + " parts of " +
                        std::to_string(out_features_local()) + " columns");
  }
  return y.slice(1, column_offsets_[i], part_columns(i));
}

void FusedColumnParallelLinear::backward_input(const Tensor& dy, Tensor& dx, bool accumulate) {
  // dx (partial over tp) = dy W  ([tokens, out] x [out, in]): every part's at once
  ops::gemm(Trans::kNo, Trans::kNo, 1.0f, dy, weight_group_->compute(), accumulate ? 1.0f : 0.0f,
            dx);
}

void FusedColumnParallelLinear::backward_weights(const Tensor& dy) {
  // dW += dy^T x  ([out, tokens] x [tokens, in]), db += sum_t dy
  if (bias_group_) {
    ops::linear_weight_grads(dy, x_, weight_group_->grad(), bias_group_->grad());
  } else {
    ops::gemm(Trans::kYes, Trans::kNo, 1.0f, dy, x_, 1.0f, weight_group_->grad());
  }
}

std::vector<Parameter*> FusedColumnParallelLinear::parameters() {
  std::vector<Parameter*> params = pointers(weights_);
  for (Parameter* b : pointers(biases_)) params.push_back(b);
  return params;
}

}  // namespace colrow
