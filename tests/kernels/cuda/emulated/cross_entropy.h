// kernels/cuda/cross_entropy.h's entry points on host tensors: the same
// checks, then the same kernels (cross_entropy_kernels.cuh) with the same
// grids, run through the warp emulation (support/warp_emulation.h). The
// cross-entropy GPU test compiled with COLROW_WARP_EMULATION calls these.
#pragma once

#include "kernels/backend.h"

namespace colrow::testing::emulated {

void cross_entropy_partials(const Tensor& logits_local, const kernels::CrossEntropyRows& rows,
                            Tensor& partials);
void cross_entropy_combine(const Tensor& gathered, const kernels::CrossEntropyRows& rows,
                           Tensor& max, Tensor& sum_exp, Tensor& losses);
void cross_entropy_backward(const Tensor& logits_local, const kernels::CrossEntropyRows& rows,
                            const Tensor& max, const Tensor& sum_exp, const Tensor* dloss,
                            float uniform_scale, Tensor& dlogits_local);

}  // namespace colrow::testing::emulated
