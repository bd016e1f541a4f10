// The CUDA backend of a CPU-only build: there is none, and asking for it says
// how to get one.
#include "colrow/core/error.h"
#include "kernels/backend.h"

namespace colrow::kernels {

Backend& cuda_backend(int device) {
  throw ConfigError("[device] kernels on cuda:" + std::to_string(device) +
                    " need CUDA, but this colrow was built without it. Rebuild with the CUDA "
                    "toolkit installed (cmake -DCOLROW_CUDA=ON), or use --device cpu.");
}

}  // namespace colrow::kernels
