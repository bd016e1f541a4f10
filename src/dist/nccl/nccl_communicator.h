// NcclCommunicator: collectives on GPU tensors through NCCL, one rank per GPU.
// The group's MPI communicator stays underneath and carries everything that is
// not GPU data: the NCCL unique id at construction, CPU-tensor collectives,
// barrier, all_ranks_failing and abort, so errors and stops never wait on NCCL.
// GPU collectives are queued on the device's compute stream and return at
// once; the next kernel or copy on that stream sees the result.
// Two implementations of make_nccl_communicator, chosen by CMake:
// dist/nccl (NCCL) and dist/no_nccl (a CPU-only build: a ConfigError saying
// how to rebuild). This header names no NCCL or CUDA type, so both can use it.
#pragma once

#include <memory>
#include <string>

#include "colrow/core/device.h"
#include "colrow/dist/communicator.h"

struct ncclComm;  // nccl.h: typedef struct ncclComm* ncclComm_t

namespace colrow {

// Collective over `host`'s group: every rank passes its own GPU (no two ranks
// of the group on one GPU: NCCL refuses that, see make_device_communicator).
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host,
                                                     Device device);

// Defined only in builds with NCCL; everything else uses the factory above.
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> host, Device device);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }

  void all_reduce_sum(Tensor& x) override;
  void all_reduce_max(Tensor& x) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  void broadcast(Tensor& x, int root) override;
  // The MPI group's barrier: it orders the ranks' host code, not queued GPU work.
  void barrier() override;
  // Splits the MPI group, then builds a new NCCL communicator over the result.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;
  bool all_ranks_failing(double timeout_seconds) override;
  [[noreturn]] void abort(int exit_code) override;

 private:
  enum class Reduction { kSum, kMax };
  void all_reduce(Tensor& x, Reduction reduction, const char* what);

  std::unique_ptr<Communicator> host_;
  Device device_;
  ncclComm* comm_ = nullptr;
};

}  // namespace colrow
