// TpRegionInput: the entry of a tensor-parallel region (attention, MLP, the
// output head), where column-parallel layers read the whole activation and
// their partial input gradients are summed over tp on the way back.
//   Without sequence parallelism x is whole on every rank already: forward
//   passes it through, backward all-reduces the partial dx (Megatron's
//   copy_to_tp, "f").
//   With it (Megatron's sequence parallelism), each rank holds a block of
//   tokens: forward all-gathers the blocks, backward reduce-scatters the
//   partial dx back to this rank's block (gather_from_sp). The gathered input
//   lives in one buffer shared by every region (per shape and device, as
//   Megatron's global memory buffer), so it costs one [tokens, d] however
//   many layers there are; backward gathers it again for the weight gradients.
// Backward overlaps communication with computation, as Megatron's
// asynchronous gradient all-reduce does: the re-gather runs during the
// input-gradient GEMMs, the sum of dx during the weight-gradient GEMMs.
//
// Backward, in order:
//   Tensor& dx = region.partial_grad();  // starts the re-gather (SP)
//   ... dx = sum of the column layers' dy W (backward_input) ...
//   region.reduce_partial_grad();        // waits for it; starts summing dx
//   ... the column layers' weight gradients (backward_weights) ...
//   const Tensor& summed = region.grad(); // waits for the sum
#pragma once

#include <cstdint>
#include <memory>

#include "colrow/core/tensor.h"
#include "colrow/dist/communicator.h"

namespace colrow {

struct SharedGatherBuffer;  // tp_region_input.cpp

class TpRegionInput {
 public:
  // overlap = false waits for each collective where it starts (to measure
  // what overlapping gains).
  TpRegionInput(Communicator& tp, bool sequence_parallel, bool overlap = true);
  // The same choice after construction; takes effect from the next backward.
  void set_overlap(bool overlap) { overlap_ = overlap; }

  // x: [tokens, d] (or this rank's [tokens/tp, d]) -> the whole [tokens, d].
  // x must stay unchanged until backward.
  const Tensor& forward(const Tensor& x);
  // The buffer for the partial dx, [tokens, d] of the last forward.
  Tensor& partial_grad();
  // Starts summing partial_grad() over tp.
  void reduce_partial_grad();
  // The whole input of the last forward (for the weight gradients), after
  // reduce_partial_grad(): partial_grad() gathered it again if another region
  // had used the shared buffer since.
  const Tensor& input();
  // The partial dx summed over tp: [tokens, d] (or this rank's [tokens/tp, d]).
  const Tensor& grad();

  // grad() from now on lives in a buffer every layer shares
  // (nn/shared_buffer.h: layer_buffer): valid until the next layer's backward.
  void share_buffers() { shared_buffers_ = true; }

  // The rows this rank holds of `tokens` token rows outside the region.
  int64_t local_rows(int64_t tokens) const {
    return sequence_parallel_ ? tokens / tp_.size() : tokens;
  }

 private:
  // SP: the shared buffer holds this region's gather (starting it if not).
  void start_gather();
  void finish(std::unique_ptr<PendingCollective>& pending);

  Communicator& tp_;
  bool sequence_parallel_;
  bool overlap_;
  bool shared_buffers_ = false;
  uint64_t id_;                             // which region last filled a shared buffer
  Tensor x_;                                // the last forward's input (this rank's rows)
  SharedGatherBuffer* gathered_ = nullptr;  // SP: the shared [tokens, d] buffer
  Tensor dx_;                               // [tokens, d]: the partial input gradient
  Tensor dx_local_;                         // [tokens/tp, d]: its reduce-scatter (SP)
  std::unique_ptr<PendingCollective> gathering_, reducing_;
};

// InvalidInputError unless `tokens` (batch x seq) splits evenly over tp, as
// sequence parallelism needs; `what` names the caller.
void require_tokens_divisible(int64_t tokens, int tp, const char* what);

}  // namespace colrow
