// The pieces of the global gradient norm under tp x dp that AdamW::step uses
// (the one place the norm is computed; torch.nn.utils.clip_grad_norm_,
// Megatron's clip_grad_norm_fp32): an exact sum of per-rank partial sums of
// squares over a group, and the clipping factor. Each element of the full
// model counts once: AdamW adds a tensor replicated over tp on its first
// replica only (ShardSpec::first_replica).
#pragma once

#include <vector>

#include "colrow/dist/communicator.h"

namespace colrow {

// The sum over `group` of each rank's `partial`, in double and bitwise equal
// on every rank: one all_gather of (hi, lo) = (float(partial), float(partial -
// hi)), which carries a double to 2^-48 relative, then a sum in rank order.
// (An fp32 all_reduce_sum would round at 2^-24 and may differ between ranks.)
double sum_over(Communicator& group, double partial);

// The factor gradients are scaled by when their global norm is `norm`:
// min(1, max_norm / (norm + 1e-6)) (torch.nn.utils.clip_grad_norm_); 1 when
// max_norm <= 0 (no clipping).
double clip_coefficient(double norm, double max_norm);

}  // namespace colrow
