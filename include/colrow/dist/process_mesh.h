// ProcessMesh: the world as a tp x pp x dp grid, Megatron's 3D layout. World
// rank = (dp_rank * pp + pp_rank) * tp + tp_rank: tp innermost, so a tp group
// (the most traffic: every layer's all-reduces) is consecutive ranks on one
// node; then pp, whose stages pass activations point to point; dp outermost
// (one gradient reduction per step). Groups come from split()
// (MPI_Comm_split), so there is no global process-group state.
#pragma once

#include <memory>

#include "colrow/dist/communicator.h"
#include "colrow/dist/device_communicator.h"

namespace colrow {

class ProcessMesh {
 public:
  // Pure check, identical on every rank: tp, pp, dp >= 1 and
  // tp * pp * dp == world_size.
  static void validate(int tp, int pp, int dp, int world_size);
  // --tp as given, or when 0 what the other degrees leave of the world:
  // world_size / (pp x dp), at least 1 (validate() then judges it).
  static int resolve_tp(int tp, int pp, int dp, int world_size);

  // Collective over `world` (every rank must call it with the same degrees).
  ProcessMesh(Communicator& world, int tp, int pp, int dp);
  // The same grid for tensors on `device`: each group (pp included, so its
  // messages take the same transport) is wrapped by make_device_communicator
  // (shared memory or MPI on the CPU, NCCL or host-staged for a GPU, `comm`
  // choosing). Control traffic stays on world's MPI.
  ProcessMesh(Communicator& world, int tp, int pp, int dp, Device device, CommKind comm);

  Communicator& world() { return world_; }
  // Same (dp, pp): ordered by tp_rank.
  Communicator& tp() { return *tp_; }
  // Same (dp, tp): the pipeline's stages, ordered by pp_rank.
  Communicator& pp() { return *pp_; }
  // Same (pp, tp): the replicas, ordered by dp_rank.
  Communicator& dp() { return *dp_; }
  // Same dp: one replica's tp x pp ranks, ordered by world rank (Megatron's
  // model-parallel group; it writes one checkpoint together). Host MPI:
  // control data and file writes only.
  Communicator& model_parallel() { return *model_parallel_; }
  int tp_size() const { return tp_->size(); }
  int tp_rank() const { return tp_->rank(); }
  int pp_size() const { return pp_->size(); }
  int pp_rank() const { return pp_->rank(); }
  int dp_size() const { return dp_->size(); }
  int dp_rank() const { return dp_->rank(); }

 private:
  Communicator& world_;
  std::unique_ptr<Communicator> tp_;
  std::unique_ptr<Communicator> pp_;
  std::unique_ptr<Communicator> dp_;
  std::unique_ptr<Communicator> model_parallel_;
};

}  // namespace colrow
