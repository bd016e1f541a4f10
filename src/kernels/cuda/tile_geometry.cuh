// What every fused attention kernel knows of its tiles (flash_attention_kernels.cuh,
// tensor_core_attention_kernels.cuh): 64 queries against 64 keys, which tiles
// meet under the causal mask and the sliding window, and the operands a
// kernel reads. Device arithmetic only, no launch and no Tensor, so that a
// host compiler takes it too (kernels_cuda_flash_attention_emulated_test, which
// runs both the fp32 and the tensor-core kernels).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention_window.h"

namespace colrow::kernels::cuda {

constexpr int kTile = 64;             // queries per query tile, keys per key tile
constexpr int64_t kMaxTiles = 65535;  // query tiles ride on gridDim.y

__host__ __device__ inline int64_t key_tiles(int64_t seq) {
  return (seq + kTile - 1) / kTile;
}

// q, k, v as E (float, or uint16_t for bf16 bits) and what every kernel
// needs to know of them.
template <typename E>
struct Operands {
  const E* q;
  const E* k;
  const E* v;
  int64_t ldq, ldk, ldv;
  int64_t seq, n_head, group, head_dim, window;
  float scale;
  bool aligned;  // every row of q, k, v starts on 16 bytes (vector loads may read it)
};

// Query tile qt meets key tile kt when some query of qt sees some key of kt:
// the diagonal bounds kt <= qt, and the window's first key of qt's first
// query (the smallest of the tile's) must not lie past kt's last key.
__host__ __device__ inline int64_t first_key_tile(int64_t qt, int64_t window) {
  return first_visible_key(qt * kTile, window) / kTile;
}
__host__ __device__ inline bool tiles_meet(int64_t kt, int64_t qt, int64_t window) {
  return kt <= qt && kt >= first_key_tile(qt, window);
}

__device__ inline bool visible(int64_t i, int64_t j, int64_t seq, int64_t window) {
  return i < seq && j <= i && j >= first_visible_key(i, window);
}

}  // namespace colrow::kernels::cuda
