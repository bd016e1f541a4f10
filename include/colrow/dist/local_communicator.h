// LocalCommunicator: the group of one process, with no MPI underneath. Used for
// the unsharded computation a benchmark verifies against and for single-process
// tools; every collective is the identity (all_gather and reduce_scatter copy),
// and point to point, having no peer, is an error.
#pragma once

#include "colrow/dist/communicator.h"

namespace colrow {

class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(std::string name = "local") : name_(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }

  void all_reduce_sum(Tensor&) override {}
  void all_reduce_max(Tensor&) override {}
  void all_gather(const Tensor& in, Tensor& out) override;
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  void broadcast(Tensor&, int root) override;
  void barrier() override {}
  // bf16 tensors only, as on every backend; then nothing to do, or a copy.
  void all_reduce_sum_bf16_wire(Tensor& x) override;
  void reduce_scatter_sum_bf16_wire(const Tensor& in, Tensor& out) override;
  // A group of one has no peer: both are InternalError.
  std::unique_ptr<PendingCollective> start_send(const Tensor& x, int dst, int tag) override;
  void recv(Tensor& x, int src, int tag) override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;
  bool all_ranks_failing(double) override { return true; }
  [[noreturn]] void abort(int exit_code) override;

 private:
  std::string name_;
};

}  // namespace colrow
