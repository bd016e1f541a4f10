// attention_tiles.cuh's launch of rows_dot (backward's D = dO . O per row),
// emulated, for the emulated fused attention launches. Include it only in
// files built with COLROW_WARP_EMULATION.
#pragma once

#include "support/warp_emulation.h"
// After the emulation, which the kernels' header then uses.
#include "kernels/cuda/attention_tiles.cuh"

namespace colrow::testing::emulated {

template <typename E>
void launch_rows_dot(const E* dout, int64_t lddo, const E* out, int64_t ldo, int64_t tokens,
                     int64_t seq, int64_t n_head, int64_t head_dim, float* d) {
  namespace kc = kernels::cuda;
  emulation::launch(
      colrow::cuda::blocks_for(tokens * n_head, kc::kRowsDotWarps), kc::kRowsDotWarps * kc::kWarp,
      0, [&] { kc::rows_dot<E>(dout, lddo, out, ldo, tokens, seq, n_head, head_dim, d); });
}

}  // namespace colrow::testing::emulated
