// StagedCommunicator: MPI collectives for GPU tensors through host memory.
// Each collective copies its device operands into a host staging buffer, runs
// the same MPI collective there and copies the result back. Slow (two PCIe
// copies and a stream synchronization per call) but it works where NCCL does
// not: several ranks on one GPU, the usual way to run multi-rank GPU tests on
// a one-GPU machine. Host tensors and checks: DeviceGroupCommunicator. Uses
// only Tensor, so it builds (and its tests skip) without CUDA.
#pragma once

#include <cstdint>
#include <memory>

#include "dist/device_group_communicator.h"

namespace colrow {

class StagedCommunicator final : public DeviceGroupCommunicator {
 public:
  // `host`: the group's MPI communicator (owned). `device`: the GPU this
  // rank's tensors live on.
  StagedCommunicator(std::unique_ptr<Communicator> host, Device device);

  // How often the host staging buffer was (re)allocated: it grows to the
  // largest collective seen and is reused, so a training step allocates
  // nothing once the first one has run.
  int64_t staging_allocations() const { return staging_allocations_; }

 private:
  void device_all_reduce(Tensor& x, Reduction reduction) override;
  void device_all_gather(const Tensor& in, Tensor& out) override;
  void device_reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  void device_broadcast(Tensor& x, int root) override;
  // A send stages into a host copy of its own, alive until the MPI send is
  // done (later collectives reuse the staging buffer meanwhile); a receive
  // lands in the staging buffer, with MPI's count check, and is copied up.
  std::unique_ptr<PendingCollective> device_start_send(const Tensor& x, int dst, int tag) override;
  void device_recv(Tensor& x, int src, int tag) override;
  std::unique_ptr<Communicator> over(std::unique_ptr<Communicator> host) override;

  // Grows the staging buffer of `dtype` to hold `count` elements, if it does not.
  void reserve(int64_t count, DType dtype = DType::kF32);
  // A contiguous host view of `shape` at element `offset` of the reserved
  // buffer of `dtype`.
  Tensor staged(const Shape& shape, int64_t offset = 0, DType dtype = DType::kF32);
  Tensor& staging(DType dtype) { return dtype == DType::kF32 ? staging_ : staging_bf16_; }

  Tensor staging_;       // flat host buffer, [capacity]
  Tensor staging_bf16_;  // the same for the bf16 wire's sums
  int64_t staging_allocations_ = 0;
};

}  // namespace colrow
