// The fused causal attention kernels on CUDA cores (flash_attention.h;
// launched by flash_attention.cu). Legend as kernels/cpu/attention.h:
// B batch, T seq (queries i, keys j), NH query heads, NKV key/value heads, HS
// head_dim, G = NH / NKV, S = scale Q K^T, P = softmax(S) over the visible keys.
//
// Every kernel works on tiles of 64 queries x 64 keys with a 16 x 16 thread
// block; a thread owns a 4 x 4 patch of the tile's scores and, for products
// with HS columns, 4 rows x TE columns e = tx + 16 t (TE = HS / 16 rounded up
// to 1, 2, 4 or 8, so HS up to 128; HSP = 16 TE). Operands sit in shared
// memory in the layout their product reads: a thread's four rows as one
// float4 ("transposed" tiles [e][row], rows padded to 68), or one element per
// column across the 16 threads of a row ("row" tiles [row][e], padded to
// HSP + 1 so that the 4 rows a thread reads down a column fall in different
// banks).
//
// forward, per (sequence, query head, query tile): over the key tiles it
//   meets, S -> the online softmax (running max m and sum l per row) ->
//   O += P V; then O / l and lse = m + log l.
// backward: D_i = dO_i . O_i; then
//   dK, dV per (sequence, KV head, key tile), over its query heads and the
//   query tiles it meets: S and dP = dO V^T again, P = exp(S - lse),
//   dS = P (dP - D), dV += P^T dO, dK += dS^T Q;
//   dQ per (sequence, query head, query tile), over the key tiles it meets:
//   S and dP again, dQ += dS K.
//   Each gradient is one block's running sum in a fixed order (no atomics,
//   no partial sums in memory), at the cost of computing S and dP twice, as
//   the tensor-core kernels do. S is computed in forward's order in every
//   pass, so backward's P has forward's bits.
// q, k, v, out and their gradients are fp32 or bf16 (E, kernels/elements.h),
// widened as loaded into the fp32 tiles and registers, each output rounded
// once; lse and the scratch (D) stay fp32.
// A host compiler takes this header too: the fused attention GPU test runs
// these kernels on the CPU through the warp emulation as well as on a GPU.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "colrow/core/bfloat16.h"
#include "kernels/cuda/shared_memory.cuh"
#include "kernels/cuda/tile_geometry.cuh"

namespace colrow::kernels::cuda::flash {

constexpr int kSide = 16;                // the thread block is kSide x kSide
constexpr int kThreads = kSide * kSide;  // 256
constexpr int kPer = kTile / kSide;      // 4: a thread's rows (and columns) of a score tile
constexpr int kTStride = kTile + 4;      // transposed and score tiles: rows stay float4-aligned
constexpr int64_t kMaxHeadDim = 128;

// Shared-memory sizes in floats, for HSP = 16 TE columns.
constexpr int64_t row_tile(int hsp) {
  return int64_t{kTile} * (hsp + 1);
}
constexpr int64_t transposed_tile(int hsp) {
  return int64_t{hsp} * kTStride;
}
constexpr int64_t kScoreTile = int64_t{kTile} * kTStride;

// Where each kernel's tiles start in its shared memory, in floats, and the
// floats it needs: the one description the kernels carve by and the host
// sizes the launch by. The float4-read tiles come first, so they stay aligned.
struct ForwardLayout {
  int64_t Qt, Kt, Pt, V, floats;
  constexpr explicit ForwardLayout(int hsp)
      : Qt(0),
        Kt(Qt + transposed_tile(hsp)),
        Pt(Kt + transposed_tile(hsp)),
        V(Pt + kScoreTile),
        floats(V + row_tile(hsp)) {}
};
struct BackwardKvLayout {
  int64_t Qt, dOt, PS, lse, D, K, V, Q, dO, floats;
  constexpr explicit BackwardKvLayout(int hsp)
      : Qt(0),
        dOt(Qt + transposed_tile(hsp)),
        PS(dOt + transposed_tile(hsp)),
        lse(PS + kScoreTile),
        D(lse + kTile),
        K(D + kTile),
        V(K + row_tile(hsp)),
        Q(V + row_tile(hsp)),
        dO(Q + row_tile(hsp)),
        floats(dO + row_tile(hsp)) {}
};
struct BackwardQLayout {
  int64_t Qt, dOt, Kt, Vt, dS, lse, D, K, floats;
  constexpr explicit BackwardQLayout(int hsp)
      : Qt(0),
        dOt(Qt + transposed_tile(hsp)),
        Kt(dOt + transposed_tile(hsp)),
        Vt(Kt + transposed_tile(hsp)),
        dS(Vt + transposed_tile(hsp)),
        lse(dS + kScoreTile),
        D(lse + kTile),
        K(D + kTile),
        floats(K + row_tile(hsp)) {}
};

// Max and sum over the 16 threads of one score row (lanes tx of one ty: the
// xor offsets stay inside a half warp); every lane gets the same bits.
__device__ inline float row_max(float x) {
  for (int offset = kSide / 2; offset > 0; offset /= 2) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}
__device__ inline float row_sum(float x) {
  for (int offset = kSide / 2; offset > 0; offset /= 2) {
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  }
  return x;
}

__device__ inline float4 load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}

// A thread's 4 x 4 patch p[i][j] of a score tile into its transpose in a
// [64][kTStride] tile: row `row + j` gets p[0..3][j] at columns [col, col + 4).
__device__ inline void store_patch_transposed(float* tile, int row, int col,
                                              const float (&p)[kPer][kPer]) {
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    *reinterpret_cast<float4*>(tile + (row + j) * kTStride + col) =
        make_float4(p[0][j], p[1][j], p[2][j], p[3][j]);
  }
}

// acc[i][t] += sum over the 64 rows r of tile[r][col + i] x rows[r][tx + 16 t]:
// a [64][kTStride] score tile (this thread's 4 columns of it) times a row
// tile [64][HSP + 1] (its TE columns), in row order.
template <int TE>
__device__ inline void accumulate_tile_product(const float* tile, int col, const float* rows,
                                               int tx, float (&acc)[kPer][TE]) {
  constexpr int HSP = TE * kSide;
  for (int r = 0; r < kTile; ++r) {
    const float4 v = load4(tile + r * kTStride + col);
    const float a[kPer] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int t = 0; t < TE; ++t) {
      const float b = rows[r * (HSP + 1) + tx + kSide * t];
#pragma unroll
      for (int i = 0; i < kPer; ++i) acc[i][t] = fmaf(a[i], b, acc[i][t]);
    }
  }
}

// Rows [r0, r0 + 64) of src (row stride ld, HS columns), zero past T rows and
// past HS columns, widened, into a row tile [64][HSP + 1] and/or a transposed
// tile [HSP][kTStride] times cols_mul (null: not wanted).
template <int HSP, typename E>
__device__ void load_tile(const E* src, int64_t ld, int64_t r0, int64_t T, int64_t HS, float* rows,
                          float* cols, float cols_mul) {
  for (int idx = threadIdx.x; idx < kTile * HSP; idx += kThreads) {
    const int r = idx / HSP, e = idx % HSP;
    const float x = r0 + r < T && e < HS ? widen(src[(r0 + r) * ld + e]) : 0.0f;
    if (rows != nullptr) rows[r * (HSP + 1) + e] = x;
    if (cols != nullptr) cols[e * kTStride + r] = x * cols_mul;
  }
}

template <int TE, typename E>
__global__ void __launch_bounds__(kThreads)
    flash_forward(Operands<E> a, E* out, int64_t ldo, float* lse) {
  constexpr int HSP = TE * kSide;
  constexpr ForwardLayout L(HSP);
  COLROW_DYNAMIC_SHARED(flash_shared);
  float* shared = reinterpret_cast<float*>(flash_shared);
  float* Qt = shared + L.Qt;  // [HSP][kTStride], times scale
  float* Kt = shared + L.Kt;  // [HSP][kTStride]
  float* Pt = shared + L.Pt;  // [64 keys][kTStride queries]
  float* V = shared + L.V;    // [64][HSP + 1]

  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
  const int r0 = ty * kPer, c0 = tx * kPer;  // this thread's score rows and columns
  const int64_t T = a.seq, HS = a.head_dim;
  const int64_t bh = blockIdx.x, b = bh / a.n_head, h = bh % a.n_head, g = h / a.group;
  const int64_t qt = gridDim.y - 1 - blockIdx.y;  // the tiles with the most keys start first
  const int64_t i0 = qt * kTile;
  const E* k = a.k + b * T * a.ldk + g * HS;
  const E* v = a.v + b * T * a.ldv + g * HS;
  load_tile<HSP>(a.q + b * T * a.ldq + h * HS, a.ldq, i0, T, HS, nullptr, Qt, a.scale);

  float o[kPer][TE] = {};
  float m[kPer], l[kPer];  // running max of the row; this thread's part of its running sum
  for (int i = 0; i < kPer; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
  for (int64_t kt = first_key_tile(qt, a.window); kt <= qt; ++kt) {
    const int64_t j0 = kt * kTile;
    __syncthreads();  // the last tile's Kt, V and Pt are read
    load_tile<HSP>(k, a.ldk, j0, T, HS, nullptr, Kt, 1.0f);
    load_tile<HSP>(v, a.ldv, j0, T, HS, V, nullptr, 1.0f);
    __syncthreads();
    float s[kPer][kPer] = {};
    for (int e = 0; e < HS; ++e) {
      const float4 qv = load4(Qt + e * kTStride + r0), kv = load4(Kt + e * kTStride + c0);
      const float qe[kPer] = {qv.x, qv.y, qv.z, qv.w}, ke[kPer] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
#pragma unroll
        for (int j = 0; j < kPer; ++j) s[i][j] = fmaf(qe[i], ke[j], s[i][j]);
      }
    }
    float p[kPer][kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int64_t qi = i0 + r0 + i;
      bool seen[kPer];
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        seen[j] = visible(qi, j0 + c0 + j, T, a.window);
        if (seen[j]) tile_max = fmaxf(tile_max, s[i][j]);
      }
      const float m_new = fmaxf(m[i], row_max(tile_max));
      // A row with no visible key yet keeps m = -inf, l = 0, o = 0.
      const bool any = m_new != -INFINITY;
      const float alpha = any ? expf(m[i] - m_new) : 1.0f;
      l[i] *= alpha;
#pragma unroll
      for (int t = 0; t < TE; ++t) o[i][t] *= alpha;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        p[i][j] = seen[j] ? expf(s[i][j] - m_new) : 0.0f;
        l[i] += p[i][j];
      }
      m[i] = m_new;
    }
    store_patch_transposed(Pt, c0, r0, p);
    __syncthreads();
    accumulate_tile_product(Pt, r0, V, tx, o);  // O += P V over the tile's keys
  }
  float sum[kPer];  // >= 1 where the row exists: its max contributes exp(0)
#pragma unroll
  for (int i = 0; i < kPer; ++i) sum[i] = row_sum(l[i]);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int64_t qi = i0 + r0 + i;
    if (qi >= T) continue;
    const float inv = 1.0f / sum[i];
    E* row = out + (b * T + qi) * ldo + h * HS;
#pragma unroll
    for (int t = 0; t < TE; ++t) {
      const int e = tx + kSide * t;
      if (e < HS) row[e] = narrow<E>(o[i][t] * inv);
    }
    if (tx == 0) lse[bh * T + qi] = m[i] + logf(sum[i]);
  }
}

template <typename E>
struct Gradients {
  const E* dout;
  int64_t lddo;
  const float* lse;  // [B, NH, T]
  const float* d;    // [B, NH, T]
  E* dq;
  int64_t lddq;
  E* dk;
  int64_t lddk;
  E* dv;
  int64_t lddv;
};

template <int TE, typename E>
__global__ void __launch_bounds__(kThreads, 1) flash_backward_kv(Operands<E> a, Gradients<E> gr) {
  constexpr int HSP = TE * kSide;
  constexpr BackwardKvLayout L(HSP);
  COLROW_DYNAMIC_SHARED(flash_shared);
  float* shared = reinterpret_cast<float*>(flash_shared);
  float* Qt = shared + L.Qt;    // [HSP][kTStride], times scale
  float* dOt = shared + L.dOt;  // [HSP][kTStride]
  float* PS = shared + L.PS;    // [64 queries][kTStride keys]: P, then dS
  float* lse = shared + L.lse;  // [64] the query tile's
  float* D = shared + L.D;      // [64]
  float* K = shared + L.K;      // row tiles [64][HSP + 1]: K, V, Q, dO
  float* V = shared + L.V;
  float* Q = shared + L.Q;
  float* dO = shared + L.dO;

  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
  const int c0 = ty * kPer, r0 = tx * kPer;  // this thread's keys and queries of a score tile
  const int64_t T = a.seq, HS = a.head_dim, NH = a.n_head, n_kv = a.n_head / a.group;
  const int64_t bg = blockIdx.x, b = bg / n_kv, g = bg % n_kv;
  const int64_t kt = blockIdx.y, j0 = kt * kTile, query_tiles = (T + kTile - 1) / kTile;
  load_tile<HSP>(a.k + b * T * a.ldk + g * HS, a.ldk, j0, T, HS, K, nullptr, 1.0f);
  load_tile<HSP>(a.v + b * T * a.ldv + g * HS, a.ldv, j0, T, HS, V, nullptr, 1.0f);

  float dk[kPer][TE] = {}, dv[kPer][TE] = {};  // keys c0 + i, columns tx + 16 t
  for (int64_t r = 0; r < a.group; ++r) {      // the query heads of KV head g, in order
    const int64_t h = g * a.group + r;
    const float* lse_h = gr.lse + (b * NH + h) * T;
    const float* d_h = gr.d + (b * NH + h) * T;
    for (int64_t qt = kt; qt < query_tiles && tiles_meet(kt, qt, a.window); ++qt) {
      const int64_t i0 = qt * kTile;
      __syncthreads();  // the last tile's operands are read
      load_tile<HSP>(a.q + b * T * a.ldq + h * HS, a.ldq, i0, T, HS, Q, Qt, a.scale);
      load_tile<HSP>(gr.dout + b * T * gr.lddo + h * HS, gr.lddo, i0, T, HS, dO, dOt, 1.0f);
      for (int idx = threadIdx.x; idx < kTile; idx += kThreads) {
        lse[idx] = i0 + idx < T ? lse_h[i0 + idx] : 0.0f;
        D[idx] = i0 + idx < T ? d_h[i0 + idx] : 0.0f;
      }
      __syncthreads();
      // S^T and dP^T: [keys c0 + i][queries r0 + j].
      float s[kPer][kPer] = {}, dp[kPer][kPer] = {};
      for (int e = 0; e < HS; ++e) {
        const float4 qv = load4(Qt + e * kTStride + r0), gv = load4(dOt + e * kTStride + r0);
        const float qe[kPer] = {qv.x, qv.y, qv.z, qv.w}, ge[kPer] = {gv.x, gv.y, gv.z, gv.w};
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const float ke = K[(c0 + i) * (HSP + 1) + e], ve = V[(c0 + i) * (HSP + 1) + e];
#pragma unroll
          for (int j = 0; j < kPer; ++j) {
            s[i][j] = fmaf(qe[j], ke, s[i][j]);  // forward's order and operands: the same bits
            dp[i][j] = fmaf(ge[j], ve, dp[i][j]);
          }
        }
      }
      float p[kPer][kPer], ds[kPer][kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          const bool seen = visible(i0 + r0 + j, j0 + c0 + i, T, a.window);
          p[i][j] = seen ? expf(s[i][j] - lse[r0 + j]) : 0.0f;
          ds[i][j] = p[i][j] * (dp[i][j] - D[r0 + j]);
        }
      }
      store_patch_transposed(PS, r0, c0, p);
      __syncthreads();
      accumulate_tile_product(PS, c0, dO, tx, dv);  // dV += P^T dO
      __syncthreads();
      store_patch_transposed(PS, r0, c0, ds);
      __syncthreads();
      accumulate_tile_product(PS, c0, Q, tx, dk);  // dK += dS^T Q (times scale at the end)
    }
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int64_t kj = j0 + c0 + i;
    if (kj >= T) continue;
    E* dk_row = gr.dk + (b * T + kj) * gr.lddk + g * HS;
    E* dv_row = gr.dv + (b * T + kj) * gr.lddv + g * HS;
#pragma unroll
    for (int t = 0; t < TE; ++t) {
      const int e = tx + kSide * t;
      if (e < HS) {
        dk_row[e] = narrow<E>(dk[i][t] * a.scale);
        dv_row[e] = narrow<E>(dv[i][t]);
      }
    }
  }
}

// dQ of one (sequence, query head, query tile): the thread's patch is forward's
// (queries r0 + i, keys c0 + j), S and dP from transposed tiles as forward
// reads them, dS stored with keys as rows, dQ += dS K over the key tiles in
// order (queries r0 + i, columns tx + 16 t).
template <int TE, typename E>
__global__ void __launch_bounds__(kThreads, 1) flash_backward_q(Operands<E> a, Gradients<E> gr) {
  constexpr int HSP = TE * kSide;
  constexpr BackwardQLayout L(HSP);
  COLROW_DYNAMIC_SHARED(flash_shared);
  float* shared = reinterpret_cast<float*>(flash_shared);
  float* Qt = shared + L.Qt;    // [HSP][kTStride], times scale
  float* dOt = shared + L.dOt;  // [HSP][kTStride]
  float* Kt = shared + L.Kt;    // [HSP][kTStride]
  float* Vt = shared + L.Vt;    // [HSP][kTStride]
  float* dS = shared + L.dS;    // [64 keys][kTStride queries]
  float* lse = shared + L.lse;  // [64] the query tile's
  float* D = shared + L.D;      // [64]
  float* K = shared + L.K;      // [64][HSP + 1]

  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
  const int r0 = ty * kPer, c0 = tx * kPer;  // this thread's score rows and columns
  const int64_t T = a.seq, HS = a.head_dim, NH = a.n_head;
  const int64_t bh = blockIdx.x, b = bh / NH, h = bh % NH, g = h / a.group;
  const int64_t qt = gridDim.y - 1 - blockIdx.y;  // the tiles with the most keys start first
  const int64_t i0 = qt * kTile;
  const E* k = a.k + b * T * a.ldk + g * HS;
  const E* v = a.v + b * T * a.ldv + g * HS;
  load_tile<HSP>(a.q + b * T * a.ldq + h * HS, a.ldq, i0, T, HS, nullptr, Qt, a.scale);
  load_tile<HSP>(gr.dout + b * T * gr.lddo + h * HS, gr.lddo, i0, T, HS, nullptr, dOt, 1.0f);
  for (int idx = threadIdx.x; idx < kTile; idx += kThreads) {
    lse[idx] = i0 + idx < T ? gr.lse[bh * T + i0 + idx] : 0.0f;
    D[idx] = i0 + idx < T ? gr.d[bh * T + i0 + idx] : 0.0f;
  }

  float dq[kPer][TE] = {};
  for (int64_t kt = first_key_tile(qt, a.window); kt <= qt; ++kt) {
    const int64_t j0 = kt * kTile;
    __syncthreads();  // the last tile's Kt, Vt, K and dS are read
    load_tile<HSP>(k, a.ldk, j0, T, HS, K, Kt, 1.0f);
    load_tile<HSP>(v, a.ldv, j0, T, HS, nullptr, Vt, 1.0f);
    __syncthreads();
    float s[kPer][kPer] = {}, dp[kPer][kPer] = {};
    for (int e = 0; e < HS; ++e) {
      const float4 qv = load4(Qt + e * kTStride + r0), kv = load4(Kt + e * kTStride + c0);
      const float4 gv = load4(dOt + e * kTStride + r0), vv = load4(Vt + e * kTStride + c0);
      const float qe[kPer] = {qv.x, qv.y, qv.z, qv.w}, ke[kPer] = {kv.x, kv.y, kv.z, kv.w};
      const float ge[kPer] = {gv.x, gv.y, gv.z, gv.w}, ve[kPer] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          s[i][j] = fmaf(qe[i], ke[j], s[i][j]);  // forward's order and operands: the same bits
          dp[i][j] = fmaf(ge[i], ve[j], dp[i][j]);
        }
      }
    }
    float ds[kPer][kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const bool seen = visible(i0 + r0 + i, j0 + c0 + j, T, a.window);
        const float p = seen ? expf(s[i][j] - lse[r0 + i]) : 0.0f;
        ds[i][j] = p * (dp[i][j] - D[r0 + i]);
      }
    }
    store_patch_transposed(dS, c0, r0, ds);
    __syncthreads();
    accumulate_tile_product(dS, r0, K, tx, dq);  // dQ += dS K (times scale at the end)
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int64_t qi = i0 + r0 + i;
    if (qi >= T) continue;
    E* row = gr.dq + (b * T + qi) * gr.lddq + h * HS;
#pragma unroll
    for (int t = 0; t < TE; ++t) {
      const int e = tx + kSide * t;
      if (e < HS) row[e] = narrow<E>(dq[i][t] * a.scale);
    }
  }
}

inline int columns_per_thread(int64_t head_dim) {  // TE
  return head_dim <= 16 ? 1 : head_dim <= 32 ? 2 : head_dim <= 64 ? 4 : 8;
}

// fn(std::integral_constant<int, TE>{}) for head_dim (1 .. kMaxHeadDim).
template <typename Fn>
void with_columns_per_thread(int64_t head_dim, Fn&& fn) {
  switch (columns_per_thread(head_dim)) {
    case 1:
      fn(std::integral_constant<int, 1>{});
      break;
    case 2:
      fn(std::integral_constant<int, 2>{});
      break;
    case 4:
      fn(std::integral_constant<int, 4>{});
      break;
    default:
      fn(std::integral_constant<int, 8>{});
  }
}

}  // namespace colrow::kernels::cuda::flash
