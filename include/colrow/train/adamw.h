// AdamW (torch.optim.AdamW, decoupled weight decay) over a tp x dp mesh, with
// optional ZeRO-1 (Megatron's DistributedOptimizer): the moments and the update
// are split over the dp ranks. One step, in this order:
//   average grads over dp -> global grad norm -> clip -> AdamW update.
// Collectives per step: zero 0: one all_reduce_sum over dp of the flat grads
// (all_reduce_sum_bf16_wire, and reduce_scatter_sum_bf16_wire below, when
// config.grad_reduce_dtype is bf16),
// one all_gather over tp (and one over pp, pipelined) for the norm. zero 1: one reduce_scatter_sum
// over dp, one all_gather over dp and one over tp for the norm, one all_gather over dp of the
// updated parameters.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "colrow/dist/communicator.h"
#include "colrow/nn/parameter.h"
#include "colrow/train/adamw_config.h"

namespace colrow {

class AdamW {
 public:
  // `params`: this rank's parameters; the list (names, shapes, order) must be
  // the same on every dp rank of a tp rank, which it is for one model built at
  // one tp, so the flat layout agrees across dp. Allocates every buffer here.
  // `pp`: the pipeline group when the model is one stage of several; the
  // gradient norm then sums over the stages too, and counts the last stage's
  // copy of tied embeddings (Parameter::pipeline_copy) on the first stage only.
  AdamW(Communicator& tp, Communicator& dp, std::vector<Parameter*> params, AdamWConfig config,
        Communicator* pp = nullptr);

  // Averages grads over dp, clips by the global norm, updates every parameter
  // with rate `lr`. Returns the global grad norm before clipping (the same on
  // every rank; non-finite when a gradient is, on any rank). A non-finite
  // norm updates nothing: parameters, moments and the step count stay as
  // they were, on every rank (the caller stops or skips the step). Parameter::grad is left as
  // backward wrote it: the averaged, clipped grads live in the flat buffer.
  // Each updated parameter's bf16 compute copy (Parameter::compute) is
  // renewed with it, in the update's own pass where no dp gather follows.
  double step(float lr);
  void zero_grad();

  // --- state, for checkpoints ---
  // The flat layout: parameter i occupies [offset(i), offset(i) + numel) of a
  // buffer of padded_size() elements (local parameters in order, zero-padded
  // to a multiple of dp). This rank's moments cover
  // [slice_begin(), slice_begin() + slice_size()): everything under zero 0,
  // the dp_rank-th of dp equal parts under zero 1.
  const std::vector<Parameter*>& params() const { return params_; }
  int64_t offset(size_t i) const { return offsets_[i]; }
  int64_t padded_size() const { return padded_size_; }
  int64_t slice_begin() const { return slice_begin_; }
  int64_t slice_size() const { return slice_size_; }
  Tensor& exp_avg() { return exp_avg_; }        // [slice_size]: first moment
  Tensor& exp_avg_sq() { return exp_avg_sq_; }  // [slice_size]: second moment
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t steps) { step_count_ = steps; }
  const AdamWConfig& config() const { return config_; }

 private:
  std::pair<int64_t, int64_t> in_slice(size_t i) const;
  // buffer: [padded_size] = every local grad in order (in buffer's dtype),
  // then zero padding.
  void pack_grads(Tensor& buffer);
  // This rank's grads -> grad_slice_, summed over dp (through wire_ when set).
  void reduce_grads();
  double reduce_and_norm();
  void update(float lr, float grad_scale);
  void gather_parameters();

  Communicator& tp_;
  Communicator& dp_;
  Communicator* pp_;
  std::vector<Parameter*> params_;
  AdamWConfig config_;
  std::vector<int64_t> offsets_;
  std::vector<bool> counted_;  // adds to the norm on this tp rank
  std::vector<bool> decayed_;
  int64_t total_size_ = 0;   // sum of local numels
  int64_t padded_size_ = 0;  // total_size_ rounded up to a multiple of dp
  int64_t slice_begin_ = 0;
  int64_t slice_size_ = 0;
  int64_t step_count_ = 0;
  Tensor flat_;         // [padded_size]: grads in, then (zero 1) gathered parameters
  Tensor grad_slice_;   // [slice_size]: dp-averaged grads this rank updates with
  Tensor param_slice_;  // [slice_size] (zero 1): this rank's updated parameters
  // The bf16 wire (grad_reduce_dtype bf16, dp > 1): flat_ rounded [padded_size],
  // and (zero 1) this rank's block of the sum [slice_size].
  Tensor wire_;
  Tensor wire_slice_;
  Tensor exp_avg_;
  Tensor exp_avg_sq_;
};

}  // namespace colrow
