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

// The block of the weight's output rows a rank holds: part `index` of `count`
// equal parts along dim 0. Megatron's layout is {tp_rank, tp_size}. Attention
// with fewer KV heads than ranks (tp > n_kv_head) replicates each KV head over
// tp / n_kv_head ranks: k_proj and v_proj then hold {kv head, n_kv_head}, the
// same block on every rank of a replica group.
struct OutputBlock {
  int index = 0;
  int count = 1;
};

// The shard of a [out, in] weight (or [out] bias) that holds `block`'s rows.
ShardSpec output_rows(const Shape& full, OutputBlock block);
// ConfigError (before anything is allocated) unless `block` splits
// spec.out_features evenly: by tp for Megatron's layout, by its own count
// for a replicated block.
void validate_output_block(const LinearSpec& spec, int tp, OutputBlock block);

class ColumnParallelLinear {
 public:
  // Throws ConfigError (before allocating) unless out_features % tp == 0.
  ColumnParallelLinear(Communicator& tp, const LinearSpec& spec, bool gather_output = false);
  // Holds the rows `block` instead of {tp_rank, tp_size} (no gather_output);
  // ConfigError unless out_features % block.count == 0. backward() still
  // all-reduces dx over tp, which is the whole dx when every rank's dy is its
  // own share of the gradient (replicas see different query heads). Weight
  // and bias gradients of a replicated block are then partial over its
  // replicas; the caller sums them (ParallelAttention does it for the k and v
  // rows of its fused projection, FusedColumnParallelLinear).
  ColumnParallelLinear(Communicator& tp, const LinearSpec& spec, OutputBlock block);

  // x must stay unchanged until backward (it is read for the weight gradient).
  const Tensor& forward(const Tensor& x);
  // forward, and the tanh GELU of its output into `activation` ([tokens,
  // out/tp]) in the same operation (ops::linear_gelu_forward; cuBLASLt's
  // GELU_AUX epilogue in bf16). output() stays the pre-activation, which
  // RowParallelLinear::backward_through_gelu reads. Not with gather_output.
  const Tensor& forward_gelu(const Tensor& x, Tensor& activation);
  // Accumulates weight/bias gradients; returns dx after the all-reduce over tp.
  const Tensor& backward(const Tensor& dy);
  // backward in two halves, minus the all-reduce, for a caller that feeds one
  // input to several column-parallel layers, reduces their summed dx once and
  // overlaps that with the weight gradients (nn/tp_region_input.h):
  // backward_input writes (accumulate=false) or adds (accumulate=true) this
  // layer's partial dx into dx; backward_weights accumulates the weight and
  // bias gradients, reading forward's input x (which must hold it again).
  void backward_input(const Tensor& dy, Tensor& dx, bool accumulate);
  void backward_weights(const Tensor& dy);

  // The last forward's result (what forward returned).
  const Tensor& output() const { return gather_output_ ? y_full_ : y_local_; }
  Parameter& weight() { return weight_; }
  Parameter* bias() { return bias_ ? &*bias_ : nullptr; }
  int64_t out_features_local() const { return out_features_local_; }
  const LinearSpec& spec() const { return spec_; }

 private:
  ColumnParallelLinear(Communicator& tp, const LinearSpec& spec, bool gather_output,
                       OutputBlock block);
  // dy, or (gather_output) my columns of it, kept in dy_local_.
  const Tensor& local_grad(const Tensor& dy);

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
