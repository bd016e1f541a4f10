// Group communicators: the one place that decides how a group's collectives
// travel. On the CPU: shared memory (dist/shm) when every rank of the group is
// on one node, Open MPI otherwise. On a GPU: NCCL (dist/nccl) when every rank
// of the group has a GPU of its own; host-staged MPI
// (dist/staged/staged_communicator.h) when ranks share one, which NCCL
// refuses. Either way the MPI group underneath keeps carrying errors, aborts
// and flags.
#pragma once

#include <memory>
#include <string>

#include "colrow/core/device.h"
#include "colrow/dist/communicator.h"

namespace colrow {

enum class CommKind { kAuto, kMpi, kShm, kNccl, kStaged };

// "auto" | "mpi" | "shm" | "nccl" | "staged"; ConfigError otherwise.
CommKind parse_comm_kind(const std::string& text);
std::string to_string(CommKind kind);

// Whether `kind` can carry tensors on `device`: ConfigError (value, rule, fix)
// for mpi or shm with a GPU, and nccl or staged with the CPU.
void check_comm_kind(CommKind kind, Device device);

// Wraps `host`, an MPI group communicator, for tensors on `device`. Collective
// over the group: every rank calls it with a device of the same kind and the
// same `kind`. On the CPU a `host` that is not MPI (a group of one) is
// returned as is; on a GPU every host is wrapped (staged or NCCL).
// On the CPU:
//   kAuto:   shared memory when the group has more than one rank, all on one
//            node, and the segment can be made (else a note and Open MPI);
//            Open MPI otherwise.
//   kShm:    shared memory, or ConfigError when the group spans nodes.
//   kMpi:    `host` unchanged.
// On a GPU (CPU tensors keep going to `host`):
//   kAuto:   NCCL when no two ranks of the group on one node use the same GPU
//            index, host-staged MPI otherwise.
//   kNccl:   ConfigError naming the ranks when two of them share a GPU.
//   kStaged: host-staged MPI.
// `point_to_point`: the group carries a pipeline's messages; in shared memory
// they then go through mailboxes (dist/shm/shm_mailboxes.h), which need no
// help from the sender to arrive.
// `side_stream`: with NCCL, the group's started collectives run on a stream
// beside the compute stream (the dp group: gradient buckets overlapping
// backward); elsewhere it changes nothing.
std::unique_ptr<Communicator> make_device_communicator(std::unique_ptr<Communicator> host,
                                                       Device device, CommKind kind,
                                                       bool point_to_point = false,
                                                       bool side_stream = false);

}  // namespace colrow
