// NcclCommunicator: collectives on GPU tensors through NCCL, one rank per GPU.
// The group's MPI communicator stays underneath and carries everything that is
// not GPU data: the NCCL unique id at construction, CPU-tensor collectives,
// barrier, all_ranks_failing and abort, so errors and stops never wait on NCCL.
// GPU collectives are queued on the device's compute stream and return at
// once; the next kernel or copy on that stream sees the result.
// Messages (ncclSend/ncclRecv, same stream): NCCL pairs a send with a receive
// only inside one ncclGroupStart/End, so two ranks that both send first would
// wait for each other. A started send is therefore held back and goes out in
// one group with this rank's next receive (Megatron's batched isend/irecv);
// its wait(), a collective or the destructor issues it alone, and then it
// completes only once the peer's receive runs: pair each send with a receive
// (as 1F1B's send_forward_recv_backward does) before anything else.
// NCCL has no tags and cannot see the sender's count: messages between two
// ranks match in the order posted, so receives must follow the peer's send
// order (true when each direction carries one tag), and counts must agree
// (the staged and MPI backends check them).
// Two implementations of make_nccl_communicator, chosen by CMake:
// dist/nccl (NCCL) and dist/no_nccl (a CPU-only build: a ConfigError saying
// how to rebuild). This header names no NCCL or CUDA type, so both can use it.
#pragma once

#include <memory>
#include <string>

#include "colrow/core/device.h"
#include "colrow/dist/communicator.h"
#include "dist/device_group_communicator.h"

struct ncclComm;  // nccl.h: typedef struct ncclComm* ncclComm_t

namespace colrow {

// Collective over `host`'s group: every rank passes its own GPU (no two ranks
// of the group on one GPU: NCCL refuses that, see make_device_communicator).
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host,
                                                     Device device);

// Defined only in builds with NCCL; everything else uses the factory above.
// Host tensors, checks and control traffic: DeviceGroupCommunicator.
class NcclCommunicator final : public DeviceGroupCommunicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> host, Device device);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

 private:
  void device_all_reduce(Tensor& x, Reduction reduction) override;
  void device_all_gather(const Tensor& in, Tensor& out) override;
  void device_reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  void device_broadcast(Tensor& x, int root) override;
  std::unique_ptr<PendingCollective> device_start_send(const Tensor& x, int dst, int tag) override;
  void device_recv(Tensor& x, int src, int tag) override;
  // Builds a new NCCL communicator over the split MPI group.
  std::unique_ptr<Communicator> over(std::unique_ptr<Communicator> host) override;

  class SendQueue;  // the sends held back (see above), shared with their handles

  ncclComm* comm_ = nullptr;
  std::shared_ptr<SendQueue> sends_;
};

}  // namespace colrow
