// Communicator: the one interface every collective in colrow goes through (MPI,
// shared memory, NCCL, host-staged; tests wrap it in a recording one). Collectives act on whole
// tensors, so element counts are derived, never typed by hand. Gathers and
// reduce-scatters concatenate along dim 0 (the flat, contiguous order MPI
// uses); rearranging along another dim is the mappings' job (mappings.h).
// A group of size 1 returns at once, so layer code is the same at every tp.
#pragma once

#include <memory>
#include <string>

#include "colrow/core/tensor.h"

namespace colrow {

// A collective started by Communicator::start_*, not yet finished. wait()
// returns when this rank's result is in place (and rethrows the collective's
// error); until then its tensors must not be touched. The destructor waits
// too, so a handle dropped on an exception path never leaves a collective
// running over freed memory.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Short name for messages and traces ("tp", "dp", "world").
  virtual const std::string& name() const = 0;
  // Whether its collectives on device tensors are queued on the GPU's
  // compute stream with nothing done by the host, so that a CUDA graph can
  // record them (NCCL's; train/step_graph.h). A group of one has none to record.
  virtual bool capturable() const { return false; }

  // In place: every rank ends with the element-wise sum / max. x contiguous.
  virtual void all_reduce_sum(Tensor& x) = 0;
  virtual void all_reduce_max(Tensor& x) = 0;
  // out[r*n:(r+1)*n] = in of rank r, along dim 0. in: [n, ...] -> out: [size*n, ...]
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // out = rank's dim-0 block of the sum over ranks. in: [size*n, ...] -> out: [n, ...]
  virtual void reduce_scatter_sum(const Tensor& in, Tensor& out) = 0;
  virtual void broadcast(Tensor& x, int root) = 0;
  virtual void barrier() = 0;

  // The two sums with bf16 on the wire: half the bytes of the fp32 wire that
  // the collectives above use for bf16 operands (dist/fp32_wire.h). For
  // gradients reduced over dp under --grad-reduce-dtype bf16, as Megatron and
  // NCCL do it. Tensors: bf16, contiguous (InternalError otherwise). Each
  // addition is in fp32; a partial sum that one rank forwards to another
  // (Open MPI's reduction trees, NCCL's rings) is rounded to bf16 on the way,
  // so a sum over R ranks may round up to R - 1 times (shared memory: once).
  // Every backend's order is fixed: the same inputs give the same bits.
  virtual void all_reduce_sum_bf16_wire(Tensor& x) = 0;
  virtual void reduce_scatter_sum_bf16_wire(const Tensor& in, Tensor& out) = 0;

  // The same collectives, started so that the caller can compute meanwhile
  // (Megatron's asynchronous input-gradient all-reduce and sequence-parallel
  // all-gather overlap the weight-gradient GEMM; the dp reduction's buckets
  // overlap backward). Every rank starts the same collectives in the same
  // order. Several may be in flight on one communicator: they run in the
  // order started, and each must be waited for. No blocking collective may
  // run on the communicator while one is in flight. This default runs the
  // collective at once and returns a finished handle, so every backend is
  // correct; backends that can progress in the background override them.
  virtual std::unique_ptr<PendingCollective> start_all_reduce_sum(Tensor& x);
  virtual std::unique_ptr<PendingCollective> start_all_gather(const Tensor& in, Tensor& out);
  virtual std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const Tensor& in,
                                                                      Tensor& out);
  // The bf16 wire's sums, started (gradient buckets under --grad-reduce-dtype
  // bf16 overlap backward too); the same rules and the same default.
  virtual std::unique_ptr<PendingCollective> start_all_reduce_sum_bf16_wire(Tensor& x);
  virtual std::unique_ptr<PendingCollective> start_reduce_scatter_sum_bf16_wire(const Tensor& in,
                                                                                Tensor& out);

  // Point to point, for pipeline stages: activations go to the next stage,
  // gradients back to the previous one. Only the two ranks take part; `dst`
  // and `src` are ranks of this group other than this rank's own. A `tag`
  // (0 <= tag <= kMaxTag) keeps channels apart: a receive matches only a send
  // with its tag, and messages with the same (src, dst, tag) arrive in the
  // order sent (MPI's non-overtaking rule), so one tag per direction needs no
  // sequence numbers. Whole contiguous tensors; the receiver preallocates x
  // with the count sent, and another count is an error, never a truncation.
  // start_send returns at once so a rank may send to both neighbours before
  // receiving without deadlock; x must not change until wait(), as above.
  static constexpr int kMaxTag = 32767;  // the least tag bound MPI guarantees
  virtual std::unique_ptr<PendingCollective> start_send(const Tensor& x, int dst, int tag) = 0;
  virtual void recv(Tensor& x, int src, int tag) = 0;

  // Ranks with the same color form a new group, ordered by key.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;

  // Waits up to timeout_seconds for every rank of the group to call this too,
  // on a channel of its own that cannot match any other collective. True when
  // all arrived: the failure was seen everywhere and the job may end cleanly.
  virtual bool all_ranks_failing(double timeout_seconds) = 0;
  // Ends every process of the job; never returns.
  [[noreturn]] virtual void abort(int exit_code) = 0;
};

}  // namespace colrow
