// NcclCommunicator: collectives on GPU tensors through NCCL, one rank per GPU.
// The group's MPI communicator stays underneath and carries everything that is
// not GPU data: the NCCL unique id at construction, CPU-tensor collectives,
// barrier, all_ranks_failing and abort, so errors and stops never wait on NCCL.
// GPU collectives are queued on the device's compute stream and return at
// once; the next kernel or copy on that stream sees the result.
// With `side_stream`, started collectives (start_*: fp32, and the bf16 wire's
// sums) run on a stream of
// their own, as PyTorch's NCCL process groups and llm.c's gradient reductions
// do: the side stream waits for the compute stream's work queued before the
// start (an event), the collective is queued there, and wait() makes the
// compute stream wait for it (another event): no host synchronization, and
// the kernels queued meanwhile run beside it. Started collectives therefore
// run in the order started, as the Communicator promises. The dp group gets
// one (its gradient buckets overlap backward); tp's stay on the compute
// stream, where every layer waits for them anyway.
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
// A host wait for the GPU (a copy to the host, a synchronize) polls this
// communicator's asynchronous error and ends in BackendError instead of a
// hang, aborting it, when a peer is gone or --comm-timeout passes
// (core/host_wait.h, PyTorch's NCCL watchdog).
// Two implementations of make_nccl_communicator, chosen by CMake:
// dist/nccl (NCCL) and dist/no_nccl (a CPU-only build: a ConfigError saying
// how to rebuild). This header names no NCCL or CUDA type, so both can use it.
#pragma once

#include <memory>
#include <string>

#include "colrow/core/device.h"
#include "colrow/dist/communicator.h"
#include "dist/device_group_communicator.h"

struct ncclComm;     // nccl.h: typedef struct ncclComm* ncclComm_t
struct CUstream_st;  // cuda_runtime.h: typedef struct CUstream_st* cudaStream_t

namespace colrow {

// Collective over `host`'s group: every rank passes its own GPU (no two ranks
// of the group on one GPU: NCCL refuses that, see make_device_communicator).
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host,
                                                     Device device, bool side_stream = false);

// Defined only in builds with NCCL; everything else uses the factory above.
// Host tensors, checks and control traffic: DeviceGroupCommunicator.
class NcclCommunicator final : public DeviceGroupCommunicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> host, Device device, bool side_stream);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  bool capturable() const override { return true; }

 private:
  void device_all_reduce(Tensor& x, Reduction reduction) override;
  void device_all_gather(const Tensor& in, Tensor& out) override;
  void device_reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  void device_broadcast(Tensor& x, int root) override;
  std::unique_ptr<PendingCollective> device_start_send(const Tensor& x, int dst, int tag) override;
  void device_recv(Tensor& x, int src, int tag) override;
  std::unique_ptr<PendingCollective> device_start(const std::function<void()>& collective) override;
  // Where this communicator's NCCL calls are queued now: the side stream
  // while device_start runs a collective there, the compute stream otherwise.
  CUstream_st* stream() const;
  // Builds a new NCCL communicator over the split MPI group.
  std::unique_ptr<Communicator> over(std::unique_ptr<Communicator> host) override;

  // comm_, or BackendError once a failed host wait has aborted it.
  ncclComm* live_comm() const;

  class SendQueue;  // the sends held back (see above), shared with their handles
  class Watch;      // what host waits ask of it (core/host_wait.h)

  ncclComm* comm_ = nullptr;
  std::shared_ptr<SendQueue> sends_;
  std::unique_ptr<Watch> watch_;
  bool side_stream_;
  CUstream_st* side_ = nullptr;  // cudaStream_t, made at the first start
  bool on_side_ = false;
};

}  // namespace colrow
