// ShmMailboxes: point-to-point messages between ranks of one node that do not
// need the sender's attention to arrive. Open MPI moves a large message over
// its shared-memory transport only while the sender is inside an MPI call
// (unless it may read the sender's memory directly, which containers without
// ptrace forbid), so a pipeline stage's activation, sent before its next
// forward, would arrive after that forward and the stages would take turns.
// Here the sender copies the message into one of its slots in a shared
// segment and sends only a small control message (eager in MPI: it completes
// without the receiver) naming the slot; the receiver copies the data out and
// frees the slot itself. Matching stays MPI's: control messages carry the
// caller's tag on the group's own communicator, so messages pair by (source,
// tag) in order, as MPI_Send/MPI_Recv do. A message larger than a slot goes
// in slot-sized chunks; a chunk that finds every slot busy travels as a plain
// MPI message behind its control message (correct, only not independent of
// the sender). Messages are bytes (of fp32 or bf16 tensors); the receiver's
// tensor must hold as many as were sent.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "colrow/dist/communicator.h"
#include "colrow/dist/mpi_communicator.h"
#include "dist/shm/shared_segment.h"

namespace colrow {

class ShmMailboxes {
 public:
  static constexpr int kDefaultSlots = 4;

  // Collective over `host`'s group (ranks on one node): `slots` slots of
  // `slot_bytes` (a whole number of pages) per rank. BackendError on every
  // rank when the segment cannot be made. Messages go over `host`'s MPI
  // communicator, which must outlive this.
  ShmMailboxes(const MpiCommunicator& host, size_t slot_bytes, int slots);

  // The Communicator's start_send and recv, with its checks and messages.
  std::unique_ptr<PendingCollective> start_send(const Tensor& x, int dst, int tag);
  void recv(Tensor& x, int src, int tag);

 private:
  // My slot to copy a chunk into, or -1 when every one is still being read.
  int free_slot() const;
  std::byte* slot(int rank, int index) const;
  uint64_t* busy_flag(int rank, int index) const;

  const MpiCommunicator& host_;
  size_t slot_bytes_;
  int slots_;
  SharedSegment segment_;
};

}  // namespace colrow
