// ProcessMesh: the world as a tp x dp grid, tp innermost, as Megatron orders it:
// world ranks 0..tp-1 form the first tp group, so a tp group stays inside one
// node; ranks with the same tp_rank form a dp group. Groups come from split()
// (MPI_Comm_split), so there is no global process-group state.
#pragma once

#include <memory>

#include "colrow/dist/communicator.h"
#include "colrow/dist/device_communicator.h"

namespace colrow {

class ProcessMesh {
 public:
  // Pure check, identical on every rank: tp, dp >= 1 and tp * dp == world_size.
  static void validate(int tp, int dp, int world_size);

  // Collective over `world` (every rank must call it with the same tp, dp).
  ProcessMesh(Communicator& world, int tp, int dp);
  // The same grid for tensors on `device`: each group is wrapped by
  // make_device_communicator (NCCL or host-staged for a GPU, `comm` choosing;
  // unchanged on the CPU). Control traffic stays on world's MPI.
  ProcessMesh(Communicator& world, int tp, int dp, Device device, CommKind comm);

  Communicator& world() { return world_; }
  Communicator& tp() { return *tp_; }
  Communicator& dp() { return *dp_; }
  int tp_size() const { return tp_->size(); }
  int tp_rank() const { return tp_->rank(); }
  int dp_size() const { return dp_->size(); }
  int dp_rank() const { return dp_->rank(); }

 private:
  Communicator& world_;
  std::unique_ptr<Communicator> tp_;
  std::unique_ptr<Communicator> dp_;
};

}  // namespace colrow
