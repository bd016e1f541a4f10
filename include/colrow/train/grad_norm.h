// The global L2 norm of all gradients under tensor parallelism, and clipping by
// it (torch.nn.utils.clip_grad_norm_, Megatron's clip_grad_norm_fp32). Each
// element of the full model counts exactly once: a shard split over tp adds
// its own squares, a tensor replicated on several tp ranks is added by the
// first of its replicas only (no sqrt(tp) error). Collective: one all_gather
// over tp of each rank's partial sum (two floats).
#pragma once

#include <vector>

#include "colrow/dist/communicator.h"
#include "colrow/nn/parameter.h"

namespace colrow {

// Whether this tp rank adds `shard`'s squares to the global norm. A shard of
// `count` blocks lives on tp/count ranks each (count == tp: split, every rank;
// count == 1: replicated, rank 0; 1 < count < tp: replicated KV heads, ranks
// tp_rank % (tp/count) == 0, the first replica of each block).
// InternalError when count does not divide tp_size.
bool counted_on_rank(const ShardSpec& shard, int tp_rank, int tp_size);

// The sum over `group` of each rank's `partial`, in double and bitwise equal
// on every rank: one all_gather of (hi, lo) = (float(partial), float(partial -
// hi)), which carries a double to 2^-48 relative, then a sum in rank order.
// (An fp32 all_reduce_sum would round at 2^-24 and may differ between ranks.)
double sum_over(Communicator& group, double partial);

// sqrt of the sum over tp of the counted local squares of every grad. Call it
// after the dp reduction: gradients are then equal on every dp rank, so no dp
// sum is needed. The same on every rank of the tp group.
double global_grad_norm(Communicator& tp, const std::vector<Parameter*>& params);

// Scales every grad by min(1, max_norm / (norm + 1e-6)) and returns the norm
// before clipping (torch.nn.utils.clip_grad_norm_). max_norm <= 0: no clipping.
double clip_grad_norm(Communicator& tp, const std::vector<Parameter*>& params, double max_norm);

// The factor clip_grad_norm applies for `norm`: 1 when no clipping is due.
double clip_coefficient(double norm, double max_norm);

}  // namespace colrow
