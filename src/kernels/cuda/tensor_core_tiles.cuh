// The tiles and fragments of the tensor-core attention kernels
// (tensor_core_attention_kernels.cuh): a block is 4 warps over a tile of 64
// rows (queries or keys), warp w owning rows [16 w, 16 w + 16); operand tiles
// [64][HS + 8] bf16 in shared memory (rows padded so that the eight 16-byte
// rows an 8 x 8 ldmatrix reads fall in different banks), their A and B
// fragments for mma.sync m16n8k16, a warp's fp32 accumulators back to bf16
// operands or out to memory, and the warp-level products the kernels are
// made of. Like the kernels, this compiles for the host too (the warp
// emulation supplies warp_mma.cuh's instructions there).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "colrow/core/bfloat16.h"
#include "kernels/cuda/reductions.cuh"
#include "kernels/cuda/tile_geometry.cuh"
#include "kernels/cuda/warp_mma.cuh"

namespace colrow::kernels::cuda::tensor_cores {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;  // 128
constexpr int kRows = 16;                 // a warp's rows of a tile (mma's m)

// A tile of scores [64][64 + 8] bf16 (dS^T in the ordered backward).
constexpr int kDsLd = kTile + 8;

#ifdef COLROW_TENSOR_CORES
// The A fragment of rows [r0, r0 + 16) x columns [c0, c0 + 16) of a
// row-major tile with row stride LD.
template <int LD>
__device__ inline void load_a(uint32_t (&a)[4], const uint16_t* tile, int r0, int c0) {
  const int lane = threadIdx.x % kWarp;
  ldmatrix_x4(a, tile + (r0 + lane % 16) * LD + c0 + (lane / 16) * 8);
}

// B fragments of two neighbouring n-blocks [n0, n0 + 16) for k in [k0, k0 +
// 16): b[0], b[1] the first block's, b[2], b[3] the second's. n_major: the
// tile is stored [n][k] (K's rows for Q K^T); otherwise [k][n] (V's rows for P V).
template <int LD>
__device__ inline void load_b_n_major(uint32_t (&b)[4], const uint16_t* tile, int n0, int k0) {
  const int lane = threadIdx.x % kWarp;
  ldmatrix_x4(b, tile + (n0 + (lane / 16) * 8 + lane % 8) * LD + k0 + ((lane / 8) % 2) * 8);
}
template <int LD>
__device__ inline void load_b_k_major(uint32_t (&b)[4], const uint16_t* tile, int k0, int n0) {
  const int lane = threadIdx.x % kWarp;
  ldmatrix_x4_trans(b, tile + (k0 + ((lane / 8) % 2) * 8 + lane % 8) * LD + n0 + (lane / 16) * 8);
}

// The A fragment of rows [r0, r0 + 16) x columns [c0, c0 + 16) of the
// transpose of a tile stored [column][row] with row stride LD (dS, read from
// dS^T): matrix m of the .x4 is the 8 x 8 block (rows + 8 (m % 2), columns +
// 8 (m / 2)), whose stored rows are the columns.
template <int LD>
__device__ inline void load_a_transposed(uint32_t (&a)[4], const uint16_t* tile, int r0, int c0) {
  const int lane = threadIdx.x % kWarp;
  ldmatrix_x4_trans(a, tile + (c0 + (lane / 16) * 8 + lane % 8) * LD + r0 + ((lane / 8) % 2) * 8);
}

// Two fp32 values as a bf16 pair (the lower column in the low half), each
// rounded to nearest even.
__device__ inline uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The A fragments of a [16][N] product whose fp32 accumulators are c
// (N / 8 blocks), rounded to bf16: a[kk] covers columns [16 kk, 16 kk + 16).
template <int N>
__device__ inline void accumulators_as_a(const float (&c)[N / 8][4], uint32_t (&a)[N / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk) {
    a[kk][0] = pack_bf16(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = pack_bf16(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = pack_bf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = pack_bf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

// Rows [r0, r0 + 64) of src (row stride ld, HS columns), zero past T rows,
// into an operand tile [64][HS + 8]: by cp.async, 8 elements at a time, where
// every row is 16-byte aligned; element by element (synchronously) otherwise.
template <int HS>
__device__ void load_rows(const uint16_t* src, int64_t ld, int64_t r0, int64_t T, bool aligned,
                          uint16_t* tile) {
  constexpr int LD = HS + 8;
  if (aligned) {
    constexpr int kChunks = HS / 8;
    for (int idx = threadIdx.x; idx < kTile * kChunks; idx += kThreads) {
      const int r = idx / kChunks, c = (idx % kChunks) * 8;
      const bool inside = r0 + r < T;
      // Outside, nothing is read (a zero-byte source) but the address stays in the tensor.
      cp_async_16(tile + r * LD + c, src + (inside ? r0 + r : 0) * ld + c, inside);
    }
  } else {
    for (int idx = threadIdx.x; idx < kTile * HS; idx += kThreads) {
      const int r = idx / HS, e = idx % HS;
      tile[r * LD + e] = r0 + r < T ? src[(r0 + r) * ld + e] : uint16_t{0};
    }
  }
}

// Values [i0, i0 + 64) of a row of T floats, zero past T, into dst[64].
__device__ void load_row_values(const float* src, int64_t i0, int64_t T, float* dst) {
  for (int idx = threadIdx.x; idx < kTile; idx += kThreads) {
    const bool inside = i0 + idx < T;
    cp_async_4(dst + idx, src + (inside ? i0 + idx : 0), inside);
  }
}

// A warp's [16][HS] fp32 accumulators times `mul`, rounded to bf16, into
// rows row0 + [0, 16) of dst where they exist (< T).
template <int HS>
__device__ void write_rows(const float (&acc)[HS / 8][4], float mul, int64_t row0, int64_t T,
                           uint16_t* dst, int64_t ld) {
  const int lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t row = row0 + g + 8 * half;
    if (row >= T) continue;
#pragma unroll
    for (int nb = 0; nb < HS / 8; ++nb) {
      uint16_t* p = dst + row * ld + nb * 8 + 2 * t;
      p[0] = narrow<uint16_t>(acc[nb][2 * half] * mul);
      p[1] = narrow<uint16_t>(acc[nb][2 * half + 1] * mul);
    }
  }
}

// c [16][64] = rows [16][HS] x cols^T, cols [64][HS] in shared memory: the
// A fragments loaded from a warp's 16 rows of one tile (forward keeps Q's in
// registers and runs the same loop itself).
template <int HS>
__device__ inline void scores(const uint16_t* rows, int r0, const uint16_t* cols,
                              float (&c)[kTile / 8][4]) {
  constexpr int LD = HS + 8;
#pragma unroll
  for (int nb = 0; nb < kTile / 8; ++nb) c[nb][0] = c[nb][1] = c[nb][2] = c[nb][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
    uint32_t a[4];
    load_a<LD>(a, rows, r0, kk * 16);
#pragma unroll
    for (int n2 = 0; n2 < kTile / 16; ++n2) {
      uint32_t b[4];
      load_b_n_major<LD>(b, cols, n2 * 16, kk * 16);
      mma(c[2 * n2], a, b[0], b[1]);
      mma(c[2 * n2 + 1], a, b[2], b[3]);
    }
  }
}

// acc [16][HS] += a [16][16 KK] x tile rows [k0, k0 + 16 KK) (stored [k][HS]).
template <int HS, int KK>
__device__ inline void add_product(const uint32_t (&a)[KK][4], const uint16_t* tile, int k0,
                                   float (&acc)[HS / 8][4]) {
  constexpr int LD = HS + 8;
#pragma unroll
  for (int kk = 0; kk < KK; ++kk) {
#pragma unroll
    for (int n2 = 0; n2 < HS / 16; ++n2) {
      uint32_t b[4];
      load_b_k_major<LD>(b, tile, k0 + kk * 16, n2 * 16);
      mma(acc[2 * n2], a[kk], b[0], b[1]);
      mma(acc[2 * n2 + 1], a[kk], b[2], b[3]);
    }
  }
}

// acc's two rows of this lane (g and g + 8) times by[0] and by[1].
template <int HS>
__device__ inline void scale_rows(float (&acc)[HS / 8][4], const float (&by)[2]) {
#pragma unroll
  for (int nb = 0; nb < HS / 8; ++nb) {
    acc[nb][0] *= by[0];
    acc[nb][1] *= by[0];
    acc[nb][2] *= by[1];
    acc[nb][3] *= by[1];
  }
}

// A warp's [16][64] fp32 accumulators, rounded to bf16 (as
// accumulators_as_a rounds them), into rows [r0, r0 + 16) of a [64][kDsLd]
// tile.
__device__ inline void store_tile_rows(const float (&c)[kTile / 8][4], int r0, uint16_t* tile) {
  const int lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nb = 0; nb < kTile / 8; ++nb) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      *reinterpret_cast<uint32_t*>(tile + (r0 + g + 8 * half) * kDsLd + nb * 8 + 2 * t) =
          pack_bf16(c[nb][2 * half], c[nb][2 * half + 1]);
    }
  }
}

// Whether any element of the (query tile i0, key tile j0) block is hidden:
// the diagonal tile, a sliding window, or rows past T.
__device__ inline bool needs_mask(int64_t i0, int64_t j0, int64_t T, int64_t window) {
  return j0 + kTile > i0 || window > 0 || i0 + kTile > T;
}
#endif  // COLROW_TENSOR_CORES

}  // namespace colrow::kernels::cuda::tensor_cores
