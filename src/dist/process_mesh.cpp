// The tp x dp grid over the world communicator (tp innermost).
#include "colrow/dist/process_mesh.h"

#include <sstream>

#include "colrow/core/error.h"

namespace colrow {

void ProcessMesh::validate(int tp, int dp, int world_size) {
  if (tp < 1 || dp < 1) {
    throw ConfigError("[mesh] tp (" + std::to_string(tp) + ") and dp (" + std::to_string(dp) +
                      ") must be at least 1. Pass --tp and --dp as positive integers.");
  }
  if (static_cast<int64_t>(tp) * dp == world_size) return;
  std::ostringstream msg;
  msg << "[mesh] tp (" << tp << ") x dp (" << dp << ") = " << static_cast<int64_t>(tp) * dp
      << " must equal the world size (" << world_size << "). Launch with mpirun -np "
      << static_cast<int64_t>(tp) * dp << ", or choose tp x dp = " << world_size;
  if (world_size % tp == 0) {
    msg << " (e.g. --tp " << tp << " --dp " << world_size / tp << ")";
  } else {
    msg << " (e.g. --tp " << world_size << " --dp 1)";
  }
  msg << ".";
  throw ConfigError(msg.str());
}

ProcessMesh::ProcessMesh(Communicator& world, int tp, int dp) : world_(world) {
  validate(tp, dp, world.size());
  const int r = world.rank();
  // tp innermost: consecutive world ranks share a tp group.
  tp_ = world.split(/*color=*/r / tp, /*key=*/r % tp, "tp");
  dp_ = world.split(/*color=*/r % tp, /*key=*/r / tp, "dp");
}

ProcessMesh::ProcessMesh(Communicator& world, int tp, int dp, Device device, CommKind comm)
    : ProcessMesh(world, tp, dp) {
  tp_ = make_device_communicator(std::move(tp_), device, comm);
  dp_ = make_device_communicator(std::move(dp_), device, comm);
}

}  // namespace colrow
