// fill_random for GPU tensors: kernels::cpu::fill_random into a host buffer,
// then one copy (which returns once the host buffer has been read). Identical
// bits to the CPU backend by construction.
#include "kernels/cuda/init.h"

#include <string>

#include "colrow/core/error.h"
#include "kernels/cpu/init.h"

namespace colrow::kernels::cuda {

void fill_random(Tensor& local, const RandomFill& fill) {
  if (!local.is_contiguous() || !local.device().is_cuda()) {
    throw InternalError("[init] fill_random: local " + shape_to_string(local.shape()) + " on " +
                        local.device().str() + " must be a contiguous GPU tensor");
  }
  Tensor host = Tensor::empty(local.shape());
  cpu::fill_random(host, fill);  // checks the shard against fill.full_shape
  if (local.numel() > 0) local.copy_from(host);
}

}  // namespace colrow::kernels::cuda
