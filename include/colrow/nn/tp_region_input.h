// TpRegionInput: the entry of a tensor-parallel region (attention, MLP),
// where column-parallel layers read the whole activation and their partial
// input gradients are summed over tp on the way back.
//   Without sequence parallelism x is whole on every rank already: forward
//   passes it through, backward all-reduces the partial dx (Megatron's
//   copy_to_tp, "f").
//   With it (Megatron's sequence parallelism), each rank holds a block of
//   tokens: forward all-gathers the blocks, backward reduce-scatters the
//   partial dx back to this rank's block (gather_from_sp).
#pragma once

#include "colrow/core/tensor.h"
#include "colrow/dist/communicator.h"

namespace colrow {

class TpRegionInput {
 public:
  TpRegionInput(Communicator& tp, bool sequence_parallel);

  // x: [tokens, d] (or this rank's [tokens/tp, d]) -> the whole [tokens, d].
  // x must stay unchanged until backward when it is returned as is.
  const Tensor& forward(const Tensor& x);
  // Where the region's layers write and accumulate their partial dx:
  // [tokens, d] of the last forward.
  Tensor& partial_grad();
  // The partial dx summed over tp: [tokens, d] (or this rank's [tokens/tp, d]).
  const Tensor& backward();

  bool sequence_parallel() const { return sequence_parallel_; }
  // The rows this rank holds of `tokens` token rows outside the region.
  int64_t local_rows(int64_t tokens) const {
    return sequence_parallel_ ? tokens / tp_.size() : tokens;
  }

 private:
  Communicator& tp_;
  bool sequence_parallel_;
  Tensor gathered_;  // [tokens, d]: the all-gathered input (sequence parallel)
  Tensor dx_;        // [tokens, d]: the partial input gradient
  Tensor dx_local_;  // [tokens/tp, d]: its reduce-scatter (sequence parallel)
  Shape shape_;      // [tokens, d] of the last forward
  Device device_;    // where the last forward's input lived
};

// InvalidInputError unless `tokens` (batch x seq) splits evenly over tp, as
// sequence parallelism needs; `what` names the caller.
void require_tokens_divisible(int64_t tokens, int tp, const char* what);

}  // namespace colrow
