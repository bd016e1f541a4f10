// Launch of AdamW on the GPU (adamw.h): the kernel, its table and the
// element formula are in adamw_kernels.cuh.
#include "kernels/cuda/adamw.h"

#include <cuda_runtime.h>

#include <string>

#include "colrow/core/error.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/cuda/adamw_kernels.cuh"
#include "kernels/cuda/kept_buffers.h"
#include "kernels/cuda/operands.h"

namespace colrow::kernels::cuda {

void adamw_update(const std::vector<AdamWSegment>& segments, const AdamWStep& step) {
  const adamw_kernels::SegmentTable table = adamw_kernels::segment_table(segments);
  if (table.rows.empty()) return;
  if (!table.device.is_cuda()) {
    throw InternalError("[adamw] adamw_update: segment " + std::to_string(table.first) +
                        " lives on " + table.device.str());
  }
  // The same table every step (the segments do not move): uploaded once.
  const adamw_kernels::Segment* table_gpu =
      upload_kept_table(table.device.index, "adamw.segments", table.rows);
  adamw_kernels::adamw_chunks<<<static_cast<unsigned int>(table.chunks), adamw_kernels::kThreads, 0,
                                colrow::cuda::compute_stream(table.device.index)>>>(
      table_gpu, static_cast<int64_t>(table.rows.size()), adamw_kernels::scalars_of(step));
  COLROW_CUDA_CHECK_LAUNCH();
}

}  // namespace colrow::kernels::cuda
