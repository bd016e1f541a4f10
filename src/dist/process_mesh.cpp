// The tp x pp x dp grid over the world communicator (tp innermost, dp outermost).
#include "colrow/dist/process_mesh.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <utility>

#include "colrow/core/error.h"
#include "colrow/dist/profiled_communicator.h"

namespace colrow {

void ProcessMesh::validate(int tp, int pp, int dp, int world_size) {
  if (tp < 1 || pp < 1 || dp < 1) {
    // The fix names only the degrees that are wrong: tools without pipeline
    // stages pass pp = 1 and have no --pp.
    const std::pair<const char*, int> degrees[] = {{"--tp", tp}, {"--pp", pp}, {"--dp", dp}};
    std::string flags;
    int wrong = 0;
    for (const auto& [flag, value] : degrees) {
      if (value >= 1) continue;
      flags += (wrong++ > 0 ? " and " : "") + std::string(flag);
    }
    throw ConfigError("[mesh] tp (" + std::to_string(tp) + "), pp (" + std::to_string(pp) +
                      ") and dp (" + std::to_string(dp) + ") must be at least 1. Pass " + flags +
                      (wrong > 1 ? " as positive integers." : " as a positive integer."));
  }
  // tp x pp fits in int64; times dp it may not (three flags near INT_MAX).
  int64_t product = 0;
  const bool overflow =
      __builtin_mul_overflow(static_cast<int64_t>(tp) * pp, static_cast<int64_t>(dp), &product);
  if (!overflow && product == world_size) return;
  // The fix keeps tp, then pp, where the world size allows. It names --pp
  // only when pp was asked for: tools without pipeline stages have no --pp.
  int tp_fix = world_size, pp_fix = 1, dp_fix = 1;
  if (world_size % (static_cast<int64_t>(tp) * pp) == 0) {
    tp_fix = tp;
    pp_fix = pp;
    dp_fix = static_cast<int>(world_size / (static_cast<int64_t>(tp) * pp));
  } else if (world_size % tp == 0) {
    tp_fix = tp;
    dp_fix = world_size / tp;
  }
  std::ostringstream msg;
  msg << "[mesh] tp (" << tp << ") x pp (" << pp << ") x dp (" << dp
      << ") = " << (overflow ? std::string("more than 2^63") : std::to_string(product))
      << " must equal the world size (" << world_size << "). ";
  if (overflow) {
    msg << "Choose";
  } else {
    msg << "Launch with mpirun -np " << product << ", or choose";
  }
  msg << " tp x pp x dp = " << world_size << " (e.g. --tp " << tp_fix;
  if (pp != 1) msg << " --pp " << pp_fix;
  msg << " --dp " << dp_fix << ").";
  throw ConfigError(msg.str());
}

int ProcessMesh::resolve_tp(int tp, int pp, int dp, int world_size) {
  if (tp > 0) return tp;
  // In int64: pp x dp of two large flags (--pp 65536 --dp 65536) overflows an int.
  const int64_t others = static_cast<int64_t>(std::max(1, pp)) * std::max(1, dp);
  return static_cast<int>(std::max<int64_t>(1, world_size / others));
}

ProcessMesh::ProcessMesh(Communicator& world, int tp, int pp, int dp) : world_(world) {
  validate(tp, pp, dp, world.size());
  const int r = world.rank();
  const int tp_rank = r % tp, pp_rank = (r / tp) % pp, dp_rank = r / (tp * pp);
  // Every rank splits in the same order: tp, pp, dp.
  tp_ = world.split(/*color=*/r / tp, /*key=*/tp_rank, "tp");
  pp_ = world.split(/*color=*/dp_rank * tp + tp_rank, /*key=*/pp_rank, "pp");
  dp_ = world.split(/*color=*/pp_rank * tp + tp_rank, /*key=*/dp_rank, "dp");
  model_parallel_ = world.split(/*color=*/dp_rank, /*key=*/pp_rank * tp + tp_rank, "model");
}

ProcessMesh::ProcessMesh(Communicator& world, int tp, int pp, int dp, Device device, CommKind comm)
    : ProcessMesh(world, tp, pp, dp) {
  // Each timed by --profile as operations of its own (profiled_communicator.h).
  auto profiled = [](std::unique_ptr<Communicator> c) -> std::unique_ptr<Communicator> {
    return std::make_unique<ProfiledCommunicator>(std::move(c));
  };
  tp_ = profiled(make_device_communicator(std::move(tp_), device, comm));
  pp_ = profiled(make_device_communicator(std::move(pp_), device, comm, /*point_to_point=*/true));
  // dp's started collectives (the gradient buckets) run beside backward
  dp_ = profiled(make_device_communicator(std::move(dp_), device, comm, /*point_to_point=*/false,
                                          /*side_stream=*/true));
}

}  // namespace colrow
