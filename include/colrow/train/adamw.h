// AdamW (torch.optim.AdamW, decoupled weight decay) over a tp x dp mesh, with
// optional ZeRO-1 (Megatron's DistributedOptimizer): the moments and the update
// are split over the dp ranks. One step, in this order:
//   average grads over dp -> global grad norm -> clip -> AdamW update.
// The gradients cross dp in buckets (AdamWConfig::bucket_size; one bucket by
// default), each bucket's collective started in step() or, with
// overlap_grad_reduce, as soon as backward reports its gradients final
// (grads_ready). Collectives per step: zero 0: one all_reduce_sum over dp per
// bucket (all_reduce_sum_bf16_wire, and reduce_scatter_sum_bf16_wire below,
// when config.grad_reduce_dtype is bf16), one all_gather over tp (and one over
// pp, pipelined) for the norm. zero 1: one reduce_scatter_sum over dp per
// bucket, one all_gather over dp and one over tp (and one over pp, pipelined)
// for the norm, one all_gather
// over dp of the updated parameters per bucket.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
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
  // one tp, so the flat layout agrees across dp. Allocates every buffer here,
  // and moves each parameter's grad into the flat gradient buffer (its
  // values kept): copies of a Parameter made later share it, earlier ones not.
  // A ParameterGroup's parts (listed together, in its order) move as one
  // tensor, in one bucket, so a fused layer's one weight-gradient GEMM
  // accumulates straight into the buffer.
  // `pp`: the pipeline group when the model is one stage of several; the
  // gradient norm then sums over the stages too, and counts the last stage's
  // copy of tied embeddings (Parameter::pipeline_copy) on the first stage only.
  AdamW(Communicator& tp, Communicator& dp, std::vector<Parameter*> params, AdamWConfig config,
        Communicator* pp = nullptr);

  // Averages grads over dp (and over `micro_batches`: the grads hold the sum
  // of that many micro-batches' mean-loss gradients), clips by the global
  // norm, updates every parameter with rate `lr`. Returns the global grad norm before clipping (the
  // same on every rank; non-finite when a gradient is, on any rank). A non-finite norm updates
  // nothing: parameters, moments and the step count stay as they were, on every rank (the caller
  // stops or skips the step). Every Parameter::grad lives in the flat buffer from construction on
  // (Megatron's contiguous grad buffer), and the step reduces it in place: afterwards the grads
  // are spent (averaged, or holding ZeRO-1's gathered parameters) until zero_grad. Each updated
  // parameter's bf16 compute copy (Parameter::compute) is renewed with it, in the update's own
  // pass where no dp gather follows.
  double step(float lr, int micro_batches = 1);
  void zero_grad();

  // Overlap (config.overlap_grad_reduce, dp > 1): backward reports that the
  // gradients of params()[i] for every i in `indices` are final for this
  // step. A bucket whose parameters are all reported is packed and its dp
  // collective started at once, while backward goes on (several may be in
  // flight; the Communicator runs them in the order started, on a GPU on a
  // stream of their own). Every dp rank reports in the same
  // order (one model, one backward), so the collectives pair up. step()
  // starts the buckets never reported and waits for all. A no-op without
  // overlap or at dp 1. Reporting an index twice in one step is an
  // InternalError.
  void grads_ready(const std::vector<size_t>& indices);

  // --- state, for checkpoints ---
  // The flat layout: parameter i occupies [offset(i), offset(i) + numel) of a
  // buffer of padded_size() elements, made of the buckets one after another
  // (bucket 0 holds the last parameters of the list; within a bucket they
  // keep the list's order), each zero-padded under zero 1 to a multiple of
  // dp. This rank's moments (its slice, slice_size() elements) are the whole
  // buffer under zero 0; under zero 1 the dp_rank-th of dp equal parts of
  // every bucket, bucket after bucket. One bucket (the default) is the
  // parameters in list order, padded once.
  const std::vector<Parameter*>& params() const { return params_; }
  int64_t offset(size_t i) const { return offsets_[i]; }
  int64_t padded_size() const { return padded_size_; }
  int64_t slice_size() const { return slice_size_; }
  size_t bucket_count() const { return buckets_.size(); }
  Tensor& exp_avg() { return exp_avg_; }        // [slice_size]: first moment
  Tensor& exp_avg_sq() { return exp_avg_sq_; }  // [slice_size]: second moment
  // A slice-shaped tensor (a moment) of every dp rank, as one [padded_size]
  // buffer in the flat layout on every dp rank. Collective over dp.
  Tensor gather_slices(const Tensor& slice);
  // This rank's slice of a [padded_size] buffer in the flat layout.
  void copy_own_slice(const Tensor& whole, Tensor& slice) const;
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t steps) { step_count_ = steps; }
  const AdamWConfig& config() const { return config_; }

 private:
  // A bucket: [begin, begin + size) of the flat layout (size a multiple of
  // dp under zero 1), its parameters, and where this rank's part of it
  // (size / dp elements from begin + dp_rank size / dp under zero 1, all of
  // it under zero 0) lies in the slice arrays.
  struct Bucket {
    int64_t begin = 0, size = 0;
    int64_t part_begin = 0, part_size = 0;  // this rank's part, in the flat layout
    int64_t slice_offset = 0;               // where the part starts in the slice arrays
    std::vector<size_t> params;
    // Views of the buffers over this bucket, made once: a started
    // collective holds references to its tensors until it is waited for.
    Tensor flat, part, wire, wire_part;  // flat_, grad_slice_, wire_, wire_slice_
    Tensor params_part;                  // param_slice_ (zero 1)
  };
  void lay_out_buckets(Device device);
  // The first index of the unit that ends at params_[last]: last itself, or
  // the first part of its ParameterGroup (InternalError unless the group's
  // parts end there, listed together in the group's order).
  size_t unit_start(size_t last) const;
  // The part of parameter i that this rank updates: [begin, end) of the flat
  // layout (empty when begin >= end), starting at `local` in the slice arrays.
  struct Owned {
    int64_t begin, end, local;
  };
  Owned owned(size_t i) const;
  // Bucket b's grads (in the buffer's dtype: a copy, or the one rounding to
  // bf16) and zero padding -> its range of `buffer`.
  void pack_bucket(const Bucket& bucket, Tensor& buffer);
  // Packs bucket b and starts its dp sum into grad_slice_ (through wire_, the
  // bf16 wire's buffer, when set).
  void start_bucket(size_t b);
  // Every bucket not started yet, then waits: grad_slice_ holds the dp sums.
  void reduce_grads();
  double reduce_and_norm(int micro_batches);
  void update(float lr, float grad_scale);
  void gather_parameters();
  // Every parameter unreported, every bucket waiting: the next step's start.
  void reset_buckets();

  Communicator& tp_;
  Communicator& dp_;
  Communicator* pp_;
  std::vector<Parameter*> params_;
  AdamWConfig config_;
  std::vector<int64_t> offsets_;
  std::vector<size_t> bucket_of_;  // parameter -> bucket
  std::vector<Bucket> buckets_;
  // This step's progress: parameters reported, per bucket those still
  // unreported (0 once the bucket is started), the collectives in flight
  // (in order).
  std::vector<bool> reported_;
  std::vector<size_t> unreported_;
  std::vector<std::unique_ptr<PendingCollective>> in_flight_;
  std::vector<bool> counted_;  // adds to the norm on this tp rank
  std::vector<bool> decayed_;
  int64_t total_size_ = 0;   // sum of local numels
  int64_t padded_size_ = 0;  // total_size_ and the buckets' padding
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
