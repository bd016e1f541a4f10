// TP-invariant random initialization: element i of a rank's shard is element
// f(i) of the full tensor, drawn from Philox4x32-10 keyed by (seed, name
// stream, full index), so a shard is the same numbers at any tp.
#pragma once

#include "kernels/backend.h"

namespace colrow::kernels::cpu {

// local: contiguous, the shard of fill.full_shape that starts at
// fill.offset_along_dim along fill.dim.
void fill_random(Tensor& local, const RandomFill& fill);

}  // namespace colrow::kernels::cpu
