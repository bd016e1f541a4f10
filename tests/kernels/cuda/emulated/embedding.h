// kernels/cuda/embedding.h's entry points on host tensors: the same checks,
// the same scatter-add plan, then the same kernels (embedding_kernels.cuh)
// with the same grids, run through the warp emulation
// (support/warp_emulation.h). The embedding GPU test compiled with
// COLROW_WARP_EMULATION calls these.
#pragma once

#include <cstdint>
#include <vector>

#include "colrow/core/tensor.h"

namespace colrow::testing::emulated {

void embedding_forward(const std::vector<int32_t>& ids, int64_t vocab_start,
                       const Tensor& table_local, Tensor& y);
void embedding_backward(const std::vector<int32_t>& ids, int64_t vocab_start, const Tensor& dy,
                        Tensor& dtable_local);
void position_embedding_forward(Tensor& x, const Tensor& table, int64_t seq);
void position_embedding_backward(const Tensor& dx, int64_t seq, Tensor& dtable);

}  // namespace colrow::testing::emulated
