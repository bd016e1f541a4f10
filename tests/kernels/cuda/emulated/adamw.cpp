// The launch of kernels/cuda/adamw.cu, on the host through the warp
// emulation: the table read where it is (the GPU uploads it), one block per
// chunk, threads that never meet (launch_independent).
#include "support/warp_emulation.h"
// After the emulation, which the kernels' header then uses.
#include "kernels/cuda/adamw_kernels.cuh"

#include <string>

#include "kernels/cuda/emulated/adamw.h"

namespace colrow::testing::emulated {

namespace ak = kernels::cuda::adamw_kernels;

void adamw_update(const std::vector<kernels::AdamWSegment>& segments,
                  const kernels::AdamWStep& step) {
  const ak::SegmentTable table = ak::segment_table(segments);
  if (table.rows.empty()) return;
  if (!table.device.is_cpu()) {
    throw InternalError("[emulation] adamw_update: segment " + std::to_string(table.first) +
                        " lives on " + table.device.str() +
                        "; the emulated kernel takes host tensors");
  }
  const ak::Scalars s = ak::scalars_of(step);
  emulation::launch_independent(static_cast<unsigned int>(table.chunks), ak::kThreads, [&] {
    ak::adamw_chunks(table.rows.data(), static_cast<int64_t>(table.rows.size()), s);
  });
}

}  // namespace colrow::testing::emulated
