// FusedColumnParallelLinear: several column-parallel layers that read the same
// input, run as one (Megatron's linear_qkv, llm.c's fused qkv matmul). Each
// part is a ColumnParallelLinear's weight and bias, with its own name, shard
// and initialization; their local rows are stacked in one weight (and one
// bias) per rank (nn/parameter_group.h), so forward, the input gradient and
// the weight gradient are one GEMM each, not one per part:
//   forward:  x: [tokens, in] -> y: [tokens, sum_i out_i/count_i], part i's
//             output in its own block of columns (part(y, i), a view)
//   backward: dy (that shape) -> partial dx (summed over tp by the caller),
//             and every part's weight and bias gradients.
// Attention fuses q_proj, k_proj and v_proj: per rank a
// [(nh/tp + 2 nkv_local) hd, d] weight (nkv_local: nkv/tp, or 1 when the KV
// heads are replicated), one GEMM of N = 2304 for GPT-2 small at tp 1 where
// three of N = 768 ran (more output tiles per GEMM on a GPU, and x read once).
#pragma once

#include <optional>
#include <vector>

#include "colrow/dist/communicator.h"
#include "colrow/nn/column_parallel_linear.h"
#include "colrow/nn/linear_spec.h"
#include "colrow/nn/parameter_group.h"

namespace colrow {

// One fused part: what it is, and which block of its output rows this rank holds.
struct ColumnPart {
  LinearSpec spec;
  OutputBlock block;
};

class FusedColumnParallelLinear {
 public:
  // Validates each part as ColumnParallelLinear does (ConfigError before
  // allocating). The parts read one input (the same in_features) and all
  // have a bias or none do (InternalError otherwise).
  FusedColumnParallelLinear(Communicator& tp, const std::vector<ColumnPart>& parts);
  // The groups point at the parameters: the layer stays where it was built.
  FusedColumnParallelLinear(const FusedColumnParallelLinear&) = delete;
  FusedColumnParallelLinear& operator=(const FusedColumnParallelLinear&) = delete;

  // x must stay unchanged until backward_weights (it is read for dW).
  const Tensor& forward(const Tensor& x);
  // The last forward's result (what forward returned).
  const Tensor& output() const { return y_; }
  // Part i's columns of y (forward's output, or a gradient of its shape): a
  // strided view, whose rows are y's.
  Tensor part(const Tensor& y, size_t i) const;

  // dx = dy W (partial over tp), written (accumulate=false) or added.
  void backward_input(const Tensor& dy, Tensor& dx, bool accumulate);
  // Accumulates every part's weight and bias gradients from dy and forward's x.
  void backward_weights(const Tensor& dy);

  // The parts' weights, then their biases (when present): each group's parts
  // together, in its order, as AdamW's flat gradient buffer needs them.
  std::vector<Parameter*> parameters();
  ParameterGroup& weights() { return *weight_group_; }
  ParameterGroup* biases() { return bias_group_ ? &*bias_group_ : nullptr; }
  // Columns of y: all parts', and part i's.
  int64_t out_features_local() const { return column_offsets_.back(); }
  int64_t part_columns(size_t i) const { return column_offsets_[i + 1] - column_offsets_[i]; }

 private:
  std::vector<Parameter> weights_;  // one per part, views of weight_group_
  std::vector<Parameter> biases_;   // one per part, or none
  std::vector<int64_t> column_offsets_;
  std::optional<ParameterGroup> weight_group_;
  std::optional<ParameterGroup> bias_group_;
  Tensor x_;  // forward input, kept for dW
  Tensor y_;  // [tokens, out_features_local()]
};

}  // namespace colrow
