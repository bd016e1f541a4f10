// The CUDA twin of kernels/cpu/init.h: TP-invariant random initialization.
// The numbers are drawn on the host by the CPU kernel and copied to the GPU,
// so a parameter has the same bits on every device and backend (Box-Muller's
// log and cos on the GPU need not round like glibc's); it runs once.
#pragma once

#include "kernels/backend.h"

namespace colrow::kernels::cuda {

// local: contiguous, on a GPU, the shard of fill.full_shape that starts at
// fill.offset_along_dim along fill.dim.
void fill_random(Tensor& local, const RandomFill& fill);

}  // namespace colrow::kernels::cuda
