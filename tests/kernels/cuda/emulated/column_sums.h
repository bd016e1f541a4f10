// Stage 2 of kernels/cuda/column_sums.cuh on the host through the warp
// emulation, with column_sums::add_partials' grid: the emulated bias and norm
// gradients finish with it.
#pragma once

#include <cstdint>

namespace colrow::testing::emulated {

// grad[j] += fp32(sum over chunks c in order of partial[c * d + j]).
void add_column_partials(const float* partial, int64_t chunks, int64_t d, float* grad);
void add_column_partials(const double* partial, int64_t chunks, int64_t d, float* grad);

}  // namespace colrow::testing::emulated
