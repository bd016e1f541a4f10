// StagedCommunicator: MPI collectives for GPU tensors through host memory.
// Each collective copies its device operands into a host staging buffer, runs
// the same MPI collective there and copies the result back. Slow (two PCIe
// copies and a stream synchronization per call) but it works where NCCL does
// not: several ranks on one GPU, the usual way to run multi-rank GPU tests on
// a one-GPU machine. CPU tensors go to the MPI communicator unchanged.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "colrow/core/device.h"
#include "colrow/core/tensor.h"
#include "colrow/dist/communicator.h"

namespace colrow {

class StagedCommunicator final : public Communicator {
 public:
  // `host`: the group's MPI communicator (owned). `device`: the GPU this
  // rank's tensors live on.
  StagedCommunicator(std::unique_ptr<Communicator> host, Device device);

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }
  Device device() const { return device_; }

  void all_reduce_sum(Tensor& x) override;
  void all_reduce_max(Tensor& x) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  void broadcast(Tensor& x, int root) override;
  void barrier() override;
  // Splits the MPI group and stages the new group through the same device.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;
  bool all_ranks_failing(double timeout_seconds) override;
  [[noreturn]] void abort(int exit_code) override;

  // How often the host staging buffer was (re)allocated: it grows to the
  // largest collective seen and is reused, so a training step allocates
  // nothing once the first one has run.
  int64_t staging_allocations() const { return staging_allocations_; }

 private:
  // The first `count` elements of the staging buffer from element `offset`,
  // as a contiguous host tensor of `shape`.
  Tensor staging(int64_t offset, const Shape& shape);
  void reserve(int64_t count);
  template <typename Fn>
  void all_reduce(Tensor& x, const char* what, Fn&& reduce);

  std::unique_ptr<Communicator> host_;
  Device device_;
  Tensor staging_;  // flat host buffer, [capacity]
  int64_t staging_allocations_ = 0;
};

}  // namespace colrow
