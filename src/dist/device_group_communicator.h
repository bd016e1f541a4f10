// DeviceGroupCommunicator: what the GPU communicators (host-staged, NCCL)
// share. It owns the group's MPI communicator, which carries every host
// tensor and all control traffic (barrier, failure agreement, abort), checks
// each collective's operands once (all on the host or all on this rank's GPU,
// contiguous, sizes that match; peers and tags of messages) at every group
// size, answers groups of one and empty tensors itself (for collectives), and
// hands the remaining GPU work to its backend.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>

#include "colrow/core/device.h"
#include "colrow/dist/communicator.h"
#include "dist/fp32_wire.h"

namespace colrow {

class DeviceGroupCommunicator : public Communicator {
 public:
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }
  Device device() const { return device_; }

  void all_reduce_sum(Tensor& x) override;
  void all_reduce_max(Tensor& x) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  void broadcast(Tensor& x, int root) override;
  // The MPI group's barrier: it orders the ranks' host code, not queued GPU work.
  void barrier() override;
  // The backend's device_all_reduce (kSum) and device_reduce_scatter_sum on
  // the bf16 operands themselves, which it carries as bf16.
  void all_reduce_sum_bf16_wire(Tensor& x) override;
  void reduce_scatter_sum_bf16_wire(const Tensor& in, Tensor& out) override;
  // Started collectives: host tensors start on the MPI group; fp32 ones on
  // device(), and the bf16 wire's sums (bf16 operands carried as they are),
  // run the blocking collective through device_start (the backend may put it
  // beside the compute stream); other bf16 ones, whose widened copies the
  // compute stream owns, run at once.
  std::unique_ptr<PendingCollective> start_all_reduce_sum(Tensor& x) override;
  std::unique_ptr<PendingCollective> start_all_reduce_sum_bf16_wire(Tensor& x) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum_bf16_wire(const Tensor& in,
                                                                        Tensor& out) override;
  std::unique_ptr<PendingCollective> start_all_gather(const Tensor& in, Tensor& out) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const Tensor& in,
                                                              Tensor& out) override;
  // Host tensors go to the MPI group; device ones, checked (contiguous, on
  // device(), peer and tag), to the backend.
  std::unique_ptr<PendingCollective> start_send(const Tensor& x, int dst, int tag) override;
  void recv(Tensor& x, int src, int tag) override;
  // Splits the MPI group and gives the new group the same kind of backend.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;
  bool all_ranks_failing(double timeout_seconds) override;
  [[noreturn]] void abort(int exit_code) override;

 protected:
  enum class Reduction { kSum, kMax };

  // `host`: the group's MPI communicator (owned); `device`: this rank's GPU.
  DeviceGroupCommunicator(std::unique_ptr<Communicator> host, Device device, const char* kind);
  Communicator& host() { return *host_; }

  // GPU work only, with checked operands on device(), a group of two or more
  // and at least one element. Operands are fp32 (bf16 ones were widened,
  // dist/fp32_wire.h), except in the bf16 wire's sums: device_all_reduce
  // (kSum) and device_reduce_scatter_sum then get bf16 tensors, to carry as
  // bf16.
  virtual void device_all_reduce(Tensor& x, Reduction reduction) = 0;
  virtual void device_all_gather(const Tensor& in, Tensor& out) = 0;
  virtual void device_reduce_scatter_sum(const Tensor& in, Tensor& out) = 0;
  virtual void device_broadcast(Tensor& x, int root) = 0;
  // Checked operand on device(), a valid peer and tag; empty tensors included
  // (the two sides must still pair up).
  virtual std::unique_ptr<PendingCollective> device_start_send(const Tensor& x, int dst,
                                                               int tag) = 0;
  virtual void device_recv(Tensor& x, int src, int tag) = 0;
  // Runs `collective` (one blocking collective of this communicator on fp32
  // operands on device(), or a bf16 wire's sum) as a started one. This
  // default runs it at once on the compute stream and returns a finished
  // handle.
  virtual std::unique_ptr<PendingCollective> device_start(const std::function<void()>& collective);
  // The same backend over a split of the MPI group.
  virtual std::unique_ptr<Communicator> over(std::unique_ptr<Communicator> host) = 0;

 private:
  // True when every operand is a host tensor (the MPI group takes it), false
  // when every one lives on device(); InternalError for a mix or another GPU.
  bool all_on_host(const char* what, std::initializer_list<const Tensor*> operands) const;
  // What crosses for bf16 tensors: fp32 (the collectives), or bf16 (the
  // *_bf16_wire sums).
  enum class Wire { kFp32, kBf16 };
  void all_reduce(Tensor& x, Reduction reduction, Wire wire);
  void reduce_scatter(const Tensor& in, Tensor& out, Wire wire);

  std::unique_ptr<Communicator> host_;
  Device device_;
  // bf16 device tensors' fp32 widenings, kept: collectives in stream order.
  dist::Fp32Wire wire_;
};

}  // namespace colrow
