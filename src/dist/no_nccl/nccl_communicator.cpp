// The CPU-only build's NCCL backend: there is none, and asking for it says how
// to get it (CMake compiles this file instead of dist/nccl/ when NCCL is off).
#include "dist/nccl/nccl_communicator.h"

#include "colrow/core/error.h"

namespace colrow {

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> /*host*/,
                                                     Device /*device*/, bool /*side_stream*/) {
  throw ConfigError(
      "[dist] comm (nccl) needs colrow built with CUDA and NCCL. Rebuild with -DCOLROW_CUDA=ON, "
      "or use --comm staged.");
}

}  // namespace colrow
