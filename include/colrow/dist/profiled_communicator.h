// ProfiledCommunicator: wraps a group communicator so that `colrow train
// --profile N` times its collectives and messages like kernel operations
// (kernels/op_profile.h), as a phase of their own ("communication"): on a GPU
// between CUDA events on the compute stream, where NCCL queues its
// collectives (and between which a host-staged collective copies out, calls
// MPI and copies back); on the CPU by the wall clock. A started collective is
// timed twice, "<op> (start)" and "<op> (wait)": the wait is what the caller
// waited for, not the part that ran hidden behind its compute. When profiling
// is off, a call costs one branch more than the wrapped one.
#pragma once

#include <memory>
#include <string>

#include "colrow/dist/communicator.h"

namespace colrow {

class ProfiledCommunicator final : public Communicator {
 public:
  explicit ProfiledCommunicator(std::unique_ptr<Communicator> inner);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  bool capturable() const override { return inner_->capturable(); }

  void all_reduce_sum(Tensor& x) override;
  void all_reduce_max(Tensor& x) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  void broadcast(Tensor& x, int root) override;
  void barrier() override { inner_->barrier(); }
  void all_reduce_sum_bf16_wire(Tensor& x) override;
  void reduce_scatter_sum_bf16_wire(const Tensor& in, Tensor& out) override;
  std::unique_ptr<PendingCollective> start_all_reduce_sum(Tensor& x) override;
  std::unique_ptr<PendingCollective> start_all_gather(const Tensor& in, Tensor& out) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const Tensor& in,
                                                              Tensor& out) override;
  std::unique_ptr<PendingCollective> start_all_reduce_sum_bf16_wire(Tensor& x) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum_bf16_wire(const Tensor& in,
                                                                        Tensor& out) override;
  std::unique_ptr<PendingCollective> start_send(const Tensor& x, int dst, int tag) override;
  void recv(Tensor& x, int src, int tag) override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;
  bool all_ranks_failing(double timeout_seconds) override {
    return inner_->all_ranks_failing(timeout_seconds);
  }
  [[noreturn]] void abort(int exit_code) override;

  Communicator& inner() { return *inner_; }

 private:
  std::unique_ptr<Communicator> inner_;
};

}  // namespace colrow
