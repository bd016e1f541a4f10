// column_sums::add_partials' launch, emulated (column_sums.h).
#include "support/warp_emulation.h"
// After the emulation, which the kernels' header then uses.
#include "kernels/cuda/column_sums.cuh"

#include "kernels/cuda/emulated/column_sums.h"
#include "kernels/cuda/emulated/launches.h"

namespace colrow::testing::emulated {
namespace {

namespace cs = kernels::cuda::column_sums;

template <typename Acc>
void add_partials(const Acc* partial, int64_t chunks, int64_t d, float* grad) {
  over_elements(d, cs::kFinishThreads,
                [&] { cs::add_partials_kernel<Acc>(partial, chunks, d, grad); });
}

}  // namespace

void add_column_partials(const float* partial, int64_t chunks, int64_t d, float* grad) {
  add_partials(partial, chunks, d, grad);
}
void add_column_partials(const double* partial, int64_t chunks, int64_t d, float* grad) {
  add_partials(partial, chunks, d, grad);
}

}  // namespace colrow::testing::emulated
