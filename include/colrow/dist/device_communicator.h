// Device communicators: the one place that decides how a group's collectives
// reach tensors on a GPU. NCCL (dist/nccl) when every rank of the group has a
// GPU of its own; host-staged MPI (dist/staged/staged_communicator.h) when ranks
// share one, which NCCL refuses. Either way the MPI group underneath keeps
// carrying errors, aborts, flags and every CPU-tensor collective.
#pragma once

#include <memory>
#include <string>

#include "colrow/core/device.h"
#include "colrow/dist/communicator.h"

namespace colrow {

enum class CommKind { kAuto, kNccl, kStaged };

// "auto" | "nccl" | "staged"; ConfigError otherwise.
CommKind parse_comm_kind(const std::string& text);
std::string to_string(CommKind kind);

// Wraps `host`, an MPI group communicator, so that its collectives also take
// tensors on `device` (CPU tensors keep going to `host`). A CPU device returns
// `host` unchanged. Otherwise collective over the group: every rank calls it
// with a device of the same kind and the same `kind`.
//   kAuto:   NCCL when no two ranks of the group on one node use the same GPU
//            index, host-staged MPI otherwise.
//   kNccl:   ConfigError naming the ranks when two of them share a GPU.
//   kStaged: host-staged MPI.
std::unique_ptr<Communicator> make_device_communicator(std::unique_ptr<Communicator> host,
                                                       Device device, CommKind kind);

}  // namespace colrow
