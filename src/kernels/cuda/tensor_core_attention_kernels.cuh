// The kernels of fused causal attention on tensor cores
// (tensor_core_attention.h; launched by tensor_core_attention.cu), laid out
// as FlashAttention-2 is. Legend as flash_attention_kernels.cuh: B batch, T seq
// (queries i, keys j), NH query heads, NKV key/value heads, HS head_dim,
// G = NH / NKV, S = scale Q K^T, P = softmax(S).
//
// A block is 4 warps over a tile of 64 queries (forward, dQ) or 64 keys (dK,
// dV); warp w owns rows [16 w, 16 w + 16) of the tile. Every product is the
// mma.sync m16n8k16 bf16 -> fp32 instruction with its accumulators in
// registers: a warp's score tile S [16][64] is 8 accumulator fragments, and
// the same registers, rounded to bf16 in pairs, are the A operand of the next
// product (P V, dS K, P^T dO, dS^T Q) without a trip through shared memory
// (the layouts of m16n8k16's C and A fragments line up). B operands come
// from shared memory through ldmatrix (.trans where the tile is stored
// k-major), rows padded to HS + 8 elements so that the eight 16-byte rows an
// 8 x 8 load reads fall in different banks. The next tile's rows are copied
// in with cp.async while this one's products run (two buffers).
//
// forward, per (sequence, query head, query tile), over the key tiles it
//   meets: S -> online softmax (running max m and sum l of fp32 P per row,
//   in base 2) -> O = alpha O + bf16(P) V; then O / l and lse = m ln 2 + log l.
// dK, dV, per (sequence, KV head, key tile), over its query heads and the
//   query tiles it meets, one 64-query tile a step: S^T and dP^T again,
//   P = exp(S - lse), dS = P (dP - D), dV += bf16(P)^T dO, dK += bf16(dS)^T Q.
// dQ, per (sequence, query head, query tile), over the key tiles it meets:
//   S and dP again (S as forward computes it), dQ += bf16(dS) K.
// Or (AttentionBackward::kOrdered) no dQ kernel: the dK, dV kernel also
//   computes each step's dQ partial, bf16(dS) K over its 64 keys, from the
//   dS it already has (through shared memory, transposed), and adds it into
//   an fp32 sum per query row in key-tile order, each block waiting for its
//   turn (block_turns.cuh); the last key tile, the diagonal, writes dQ. Five
//   products instead of seven, and still the same bits on every run.
// dK and dQ are scaled once at the end; every output is rounded to bf16 once.
//
// The tiles, fragments and warp-level products are tensor_core_tiles.cuh's,
// the warp instructions warp_mma.cuh's. This header compiles for the host
// too, so that the fused attention GPU test (flash_attention_test) also runs
// the kernels on a CPU through an emulation of those instructions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "colrow/core/tensor.h"
#include "kernels/backend.h"
#include "kernels/checks/attention.h"
#include "kernels/cuda/block_turns.cuh"
#include "kernels/cuda/reductions.cuh"
#include "kernels/cuda/shared_memory.cuh"
#include "kernels/cuda/tensor_core_tiles.cuh"
#include "kernels/cuda/tile_geometry.cuh"
#include "kernels/cuda/warp_mma.cuh"

namespace colrow::kernels::cuda::tensor_cores {

constexpr int kMaxHeadDim = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// An operand tile [64][HS + 8] bf16, in bytes.
constexpr int64_t tile_bytes(int hs) {
  return int64_t{kTile} * (hs + 8) * 2;
}
// forward: Q, and two buffers of K and V.
constexpr int64_t forward_bytes(int hs) {
  return 5 * tile_bytes(hs);
}
// dK, dV: K, V, and two buffers of Q, dO, lse and D (64 floats each).
// dQ: Q, dO, and two buffers of K and V.
constexpr int64_t key_bytes(int hs) {
  return 6 * tile_bytes(hs) + 2 * 2 * kTile * 4;
}
constexpr int64_t query_bytes(int hs) {
  return 6 * tile_bytes(hs);
}

// bf16 bits; `aligned` also covers dO's rows in backward.
using Bf16Operands = Operands<uint16_t>;

// The ordered backward's dS^T tile ([64 keys][kDsLd]) goes in the place of
// the step's Q and dO tiles (two tiles of at least HS = 32).
static_assert(kTile * kDsLd <= 2 * kTile * (32 + 8), "dS^T fits in a step's Q and dO tiles");

struct Gradients {
  const uint16_t* dout;
  int64_t lddo;
  const float* lse;  // [B, NH, T]
  const float* d;    // [B, NH, T]
  uint16_t *dq, *dk, *dv;
  int64_t lddq, lddk, lddv;
  // The ordered backward's: dQ's partial sums [B, NH, T, HS] and, zeroed, the
  // turns [B, NH, query tiles] (key tiles added so far). Unused otherwise.
  float* dq_sums = nullptr;
  int* dq_turns = nullptr;
};

// Backward's fp32 scratch, offsets and size in floats: the row dots D
// [B, NH, T]; for the ordered backward then dQ's sums [B, NH, T, HS] (at a
// 16-byte boundary) and the turns [B, NH, query tiles] (an int32 each).
struct ScratchLayout {
  int64_t dq_sums = 0, dq_turns = 0, floats = 0;
};
inline ScratchLayout scratch_layout(int64_t batch, int64_t n_head, int64_t seq, int64_t head_dim,
                                    bool ordered) {
  const int64_t rows = batch * n_head * seq;
  if (!ordered) return {0, 0, rows};
  const int64_t sums = (rows + 3) / 4 * 4;
  const int64_t turns = sums + rows * head_dim;
  return {sums, turns, turns + batch * n_head * key_tiles(seq)};
}

// Backward's gradients: dO, dQ, dK, dV (bf16), forward's lse, the row dots D
// and, for kOrdered, dQ's sums and turns, these three in the scratch
// (scratch_layout).
inline Gradients gradients(const Tensor& dout, const Tensor& lse, Tensor& dq, Tensor& dk,
                           Tensor& dv, const AttentionDims& d, float* scratch,
                           AttentionBackward how) {
  Gradients gr{static_cast<const uint16_t*>(dout.raw_data()),
               dout.row_stride(),
               lse.data(),
               scratch,
               static_cast<uint16_t*>(dq.raw_data()),
               static_cast<uint16_t*>(dk.raw_data()),
               static_cast<uint16_t*>(dv.raw_data()),
               dq.row_stride(),
               dk.row_stride(),
               dv.row_stride()};
  if (how == AttentionBackward::kOrdered) {
    const ScratchLayout at = scratch_layout(d.batch, d.n_head, d.seq, d.head_dim, true);
    gr.dq_sums = scratch + at.dq_sums;
    gr.dq_turns = reinterpret_cast<int*>(scratch + at.dq_turns);
  }
  return gr;
}

#ifdef COLROW_TENSOR_CORES
// Where one step of the ordered backward adds its dQ partial: the sums of
// query tile qt of head h, and its turn (`mine` among the key tiles that
// meet it, from the first; the last one, the diagonal, writes dQ).
struct DqTurn {
  float* sums;   // rows [i0, i0 + 64) of [T, HS]
  uint16_t* dq;  // dQ's row i0, at head h's columns
  int* turn;
  int64_t rows;  // of the tile that exist (< T)
  int mine;
  bool first, last;  // no sum before it; no turn after it
};

// dQ += bf16(dS) K for this warp's 16 queries [r0, r0 + 16) of the tile, from
// dS^T [64 keys][kDsLd] and K [64 keys][HS + 8] in shared memory, added into
// the sums after the turns before it (or written as the first), or, on the
// last turn, scaled by `scale` and written to dQ, each element rounded once.
// Columns 16 at a time, so that few accumulators are live beside dK and dV.
template <int HS>
__device__ void add_dq(const uint16_t* ds_t, const uint16_t* K, int r0, const DqTurn& at,
                       int64_t lddq, float scale) {
  constexpr int LD = HS + 8;
  const int lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  uint32_t a[kTile / 16][4];
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) load_a_transposed<kDsLd>(a[kk], ds_t, r0, kk * 16);
#pragma unroll
  for (int n2 = 0; n2 < HS / 16; ++n2) {
    float c[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      uint32_t b[4];
      load_b_k_major<LD>(b, K, kk * 16, n2 * 16);
      mma(c[0], a[kk], b[0], b[1]);
      mma(c[1], a[kk], b[2], b[3]);
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = r0 + g + 8 * half;
      if (row >= at.rows) continue;
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
        const int64_t col = n2 * 16 + nb * 8 + 2 * t;
        float2 sum{c[nb][2 * half], c[nb][2 * half + 1]};
        auto* place = reinterpret_cast<float2*>(at.sums + row * HS + col);
        if (!at.first) {
          const float2 before = load_l2(place);
          sum = float2{before.x + sum.x, before.y + sum.y};
        }
        if (at.last) {
          uint16_t* p = at.dq + row * lddq + col;
          p[0] = narrow<uint16_t>(sum.x * scale);
          p[1] = narrow<uint16_t>(sum.y * scale);
        } else {
          store_l2(place, sum);
        }
      }
    }
  }
}
#endif  // COLROW_TENSOR_CORES

template <int HS>
__global__ void __launch_bounds__(kThreads)
    tc_forward(Bf16Operands a, uint16_t* out, int64_t ldo, float* lse) {
#ifdef COLROW_TENSOR_CORES
  constexpr int LD = HS + 8, KF = HS / 16;
  COLROW_DYNAMIC_SHARED(tc_shared);
  // Q, then buffer i's K at Q + (1 + 2 i) tiles and its V one tile on
  // (offsets, not arrays of pointers, which would live in local memory).
  uint16_t* Q = reinterpret_cast<uint16_t*>(tc_shared);
  auto K = [&](int64_t i) { return Q + (1 + 2 * (i % 2)) * kTile * LD; };
  auto V = [&](int64_t i) { return K(i) + kTile * LD; };
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;

  const int64_t T = a.seq, bh = blockIdx.x, b = bh / a.n_head, h = bh % a.n_head;
  const int64_t kv = h / a.group;
  const int64_t qt = gridDim.y - 1 - blockIdx.y;  // the tiles with the most keys start first
  const int64_t i0 = qt * kTile, first = first_key_tile(qt, a.window);
  const uint16_t* k = a.k + b * T * a.ldk + kv * HS;
  const uint16_t* v = a.v + b * T * a.ldv + kv * HS;
  load_rows<HS>(a.q + b * T * a.ldq + h * HS, a.ldq, i0, T, a.aligned, Q);
  load_rows<HS>(k, a.ldk, first * kTile, T, a.aligned, K(first));
  load_rows<HS>(v, a.ldv, first * kTile, T, a.aligned, V(first));
  cp_async_commit();

  const float scale2 = a.scale * kLog2e;  // scores in base 2: exp(x) = exp2(x log2 e)
  const int64_t qi[2] = {i0 + warp * kRows + g, i0 + warp * kRows + g + 8};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's columns only
  float o[HS / 8][4];
#pragma unroll
  for (int nb = 0; nb < HS / 8; ++nb) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.0f;
  uint32_t qf[KF][4];
  for (int64_t kt = first; kt <= qt; ++kt) {
    const int64_t j0 = kt * kTile;
    cp_async_wait_all();
    __syncthreads();  // this tile is in; every warp is done with the other buffer
    if (kt == first) {
#pragma unroll
      for (int kk = 0; kk < KF; ++kk) load_a<LD>(qf[kk], Q, warp * kRows, kk * 16);
    }
    if (kt < qt) {
      load_rows<HS>(k, a.ldk, j0 + kTile, T, a.aligned, K(kt + 1));
      load_rows<HS>(v, a.ldv, j0 + kTile, T, a.aligned, V(kt + 1));
    }
    cp_async_commit();
    const uint16_t* Kt = K(kt);
    const uint16_t* Vt = V(kt);
    float s[kTile / 8][4];
#pragma unroll
    for (int nb = 0; nb < kTile / 8; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KF; ++kk) {
#pragma unroll
      for (int n2 = 0; n2 < kTile / 16; ++n2) {
        uint32_t bf[4];
        load_b_n_major<LD>(bf, Kt, n2 * 16, kk * 16);
        mma(s[2 * n2], qf[kk], bf[0], bf[1]);
        mma(s[2 * n2 + 1], qf[kk], bf[2], bf[3]);
      }
    }
    const bool masked = needs_mask(i0, j0, T, a.window);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nb = 0; nb < kTile / 8; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e / 2;
        const int64_t j = j0 + nb * 8 + 2 * t + e % 2;
        s[nb][e] = !masked || visible(qi[half], j, T, a.window) ? s[nb][e] * scale2 : -INFINITY;
        tile_max[half] = fmaxf(tile_max[half], s[nb][e]);
      }
    }
    float alpha[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // The four lanes of a quad hold one row's columns.
      tile_max[half] = fmaxf(tile_max[half], __shfl_xor_sync(0xffffffffu, tile_max[half], 1));
      tile_max[half] = fmaxf(tile_max[half], __shfl_xor_sync(0xffffffffu, tile_max[half], 2));
      const float m_new = fmaxf(m[half], tile_max[half]);
      // A row with no visible key yet keeps m = -inf, l = 0, O = 0.
      alpha[half] = m_new == -INFINITY ? 1.0f : exp2f(m[half] - m_new);
      m[half] = m_new;
      l[half] *= alpha[half];
    }
#pragma unroll
    for (int nb = 0; nb < kTile / 8; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e / 2;
        const float p = s[nb][e] == -INFINITY ? 0.0f : exp2f(s[nb][e] - m[half]);
        s[nb][e] = p;
        l[half] += p;
      }
    }
    scale_rows<HS>(o, alpha);
    uint32_t pf[kTile / 16][4];
    accumulators_as_a<kTile>(s, pf);
    add_product<HS, kTile / 16>(pf, Vt, 0, o);  // O += bf16(P) V over the tile's keys
  }
  uint16_t* dst = out + b * T * ldo + h * HS;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l[half] += __shfl_xor_sync(0xffffffffu, l[half], 1);
    l[half] += __shfl_xor_sync(0xffffffffu, l[half], 2);
    if (t == 0 && qi[half] < T) lse[bh * T + qi[half]] = m[half] * kLn2 + logf(l[half]);
  }
  // l >= 1 where the row exists: its max contributes exp(0).
  const float inv[2] = {1.0f / l[0], 1.0f / l[1]};
  scale_rows<HS>(o, inv);
  write_rows<HS>(o, 1.0f, i0 + warp * kRows, T, dst, ldo);
#else
  __trap();  // built for a GPU without bf16 tensor cores: never launched there
#endif
}

// What probabilities_and_ds needs of one element: whether the mask shows it,
// and its query's lse (times log2 e) and D = dO . O.
struct ElementRow {
  bool shown;
  float lse2, d;
};

// dS and P of one [16][64] block from its scores s and dP (accumulators),
// in place: s becomes P = exp(scale s - lse), dp becomes dS = P (dP - D);
// `row_of(nb, e)` gives each element's ElementRow.
template <typename RowOf>
__device__ inline void probabilities_and_ds(float (&s)[kTile / 8][4], float (&dp)[kTile / 8][4],
                                            float scale2, RowOf row_of) {
#pragma unroll
  for (int nb = 0; nb < kTile / 8; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const ElementRow row = row_of(nb, e);
      const float p = row.shown ? exp2f(fmaf(s[nb][e], scale2, -row.lse2)) : 0.0f;
      s[nb][e] = p;
      dp[nb][e] = p * (dp[nb][e] - row.d);
    }
  }
}

// kOrdered: also dQ, in turns (AttentionBackward::kOrdered; no tc_backward_q).
template <int HS, bool kOrdered>
__global__ void __launch_bounds__(kThreads) tc_backward_kv(Bf16Operands a, Gradients gr) {
#ifdef COLROW_TENSOR_CORES
  constexpr int LD = HS + 8;
  COLROW_DYNAMIC_SHARED(tc_shared);
  // K, V, then buffer i's Q at K + (2 + 2 i) tiles and its dO one tile on;
  // after the six tiles, buffer i's lse and D (64 floats each).
  uint16_t* K = reinterpret_cast<uint16_t*>(tc_shared);
  uint16_t* V = K + kTile * LD;
  auto Q = [&](int i) { return K + (2 + 2 * i) * kTile * LD; };
  auto dO = [&](int i) { return Q(i) + kTile * LD; };
  float* row_values = reinterpret_cast<float*>(K + 6 * kTile * LD);
  auto lse = [&](int i) { return row_values + 2 * i * kTile; };
  auto D = [&](int i) { return lse(i) + kTile; };
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;

  const int64_t T = a.seq, NH = a.n_head, n_kv = a.n_head / a.group;
  const int64_t bg = blockIdx.x, b = bg / n_kv, kv = bg % n_kv;
  const int64_t kt = blockIdx.y, j0 = kt * kTile, query_tiles = key_tiles(T);
  // The (query head, query tile) pairs, in order: rep over the group, then
  // qt from the diagonal on while the tiles meet.
  int64_t last_qt = kt;
  while (last_qt + 1 < query_tiles && tiles_meet(kt, last_qt + 1, a.window)) ++last_qt;
  const int64_t per_head = last_qt - kt + 1, steps = a.group * per_head;
  auto load_step = [&](int64_t step, int buf) {
    const int64_t h = kv * a.group + step / per_head, i0 = (kt + step % per_head) * kTile;
    load_rows<HS>(a.q + b * T * a.ldq + h * HS, a.ldq, i0, T, a.aligned, Q(buf));
    load_rows<HS>(gr.dout + b * T * gr.lddo + h * HS, gr.lddo, i0, T, a.aligned, dO(buf));
    load_row_values(gr.lse + (b * NH + h) * T, i0, T, lse(buf));
    load_row_values(gr.d + (b * NH + h) * T, i0, T, D(buf));
  };
  load_rows<HS>(a.k + b * T * a.ldk + kv * HS, a.ldk, j0, T, a.aligned, K);
  load_rows<HS>(a.v + b * T * a.ldv + kv * HS, a.ldv, j0, T, a.aligned, V);
  load_step(0, 0);
  cp_async_commit();

  const float scale2 = a.scale * kLog2e;
  const int64_t kj[2] = {j0 + warp * kRows + g, j0 + warp * kRows + g + 8};  // this lane's keys
  float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
  for (int nb = 0; nb < HS / 8; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[nb][e] = dv[nb][e] = 0.0f;
  }
  for (int64_t step = 0; step < steps; ++step) {
    const int buf = static_cast<int>(step % 2);
    const int64_t i0 = (kt + step % per_head) * kTile;
    cp_async_wait_all();
    __syncthreads();  // this step's rows are in; every warp is done with the other buffers
    if (step + 1 < steps) load_step(step + 1, 1 - buf);
    cp_async_commit();
    const bool masked = needs_mask(i0, j0, T, a.window);
    float st[kTile / 8][4], dpt[kTile / 8][4];
    scores<HS>(K, warp * kRows, Q(buf), st);    // S^T: this warp's keys x the tile's queries
    scores<HS>(V, warp * kRows, dO(buf), dpt);  // dP^T
    const float* lse_t = lse(buf);
    const float* d_t = D(buf);
    probabilities_and_ds(st, dpt, scale2, [&](int nb, int e) {
      const int col = nb * 8 + 2 * t + e % 2;  // the query, within the tile
      const bool shown = !masked || visible(i0 + col, kj[e / 2], T, a.window);
      return ElementRow{shown, lse_t[col] * kLog2e, d_t[col]};
    });
    uint32_t pf[kTile / 16][4], dsf[kTile / 16][4];
    accumulators_as_a<kTile>(st, pf);
    accumulators_as_a<kTile>(dpt, dsf);
    add_product<HS, kTile / 16>(pf, dO(buf), 0, dv);  // dV += bf16(P)^T dO
    add_product<HS, kTile / 16>(dsf, Q(buf), 0, dk);  // dK += bf16(dS)^T Q (scaled at the end)
    if constexpr (kOrdered) {
      const int64_t h = kv * a.group + step / per_head, qt = kt + step % per_head;
      const int64_t first = first_key_tile(qt, a.window);
      const DqTurn at{gr.dq_sums + ((b * NH + h) * T + i0) * HS,
                      gr.dq + (b * T + i0) * gr.lddq + h * HS,
                      gr.dq_turns + (b * NH + h) * query_tiles + qt,
                      std::min<int64_t>(kTile, T - i0),
                      static_cast<int>(kt - first),
                      kt == first,
                      kt == qt};
      __syncthreads();  // every warp is done with this step's Q and dO: dS^T takes their place
      uint16_t* ds_t = Q(buf);
      store_tile_rows(dpt, warp * kRows, ds_t);
      if (threadIdx.x == 0) wait_for_turn(at.turn, at.mine);
      __syncthreads();  // dS^T is whole, and the key tiles before this one have added
      add_dq<HS>(ds_t, K, warp * kRows, at, gr.lddq, a.scale);
      if (!at.last) {
        __threadfence();
        __syncthreads();  // every thread's sums are out
        if (threadIdx.x == 0) pass_turn(at.turn);
      }
    }
  }
  const int64_t row0 = j0 + warp * kRows;
  write_rows<HS>(dk, a.scale, row0, T, gr.dk + b * T * gr.lddk + kv * HS, gr.lddk);
  write_rows<HS>(dv, 1.0f, row0, T, gr.dv + b * T * gr.lddv + kv * HS, gr.lddv);
#else
  __trap();  // built for a GPU without bf16 tensor cores: never launched there
#endif
}

template <int HS>
__global__ void __launch_bounds__(kThreads) tc_backward_q(Bf16Operands a, Gradients gr) {
#ifdef COLROW_TENSOR_CORES
  constexpr int LD = HS + 8;
  COLROW_DYNAMIC_SHARED(tc_shared);
  // Q, dO, then buffer i's K at Q + (2 + 2 i) tiles and its V one tile on.
  uint16_t* Q = reinterpret_cast<uint16_t*>(tc_shared);
  uint16_t* dO = Q + kTile * LD;
  auto K = [&](int64_t i) { return Q + (2 + 2 * (i % 2)) * kTile * LD; };
  auto V = [&](int64_t i) { return K(i) + kTile * LD; };
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;

  const int64_t T = a.seq, bh = blockIdx.x, b = bh / a.n_head, h = bh % a.n_head;
  const int64_t kv = h / a.group;
  const int64_t qt = gridDim.y - 1 - blockIdx.y, i0 = qt * kTile;
  const int64_t first = first_key_tile(qt, a.window);
  const uint16_t* k = a.k + b * T * a.ldk + kv * HS;
  const uint16_t* v = a.v + b * T * a.ldv + kv * HS;
  load_rows<HS>(a.q + b * T * a.ldq + h * HS, a.ldq, i0, T, a.aligned, Q);
  load_rows<HS>(gr.dout + b * T * gr.lddo + h * HS, gr.lddo, i0, T, a.aligned, dO);
  load_rows<HS>(k, a.ldk, first * kTile, T, a.aligned, K(first));
  load_rows<HS>(v, a.ldv, first * kTile, T, a.aligned, V(first));
  cp_async_commit();

  const float scale2 = a.scale * kLog2e;
  const int64_t qi[2] = {i0 + warp * kRows + g, i0 + warp * kRows + g + 8};
  float row_lse2[2], row_d[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    row_lse2[half] = qi[half] < T ? gr.lse[bh * T + qi[half]] * kLog2e : 0.0f;
    row_d[half] = qi[half] < T ? gr.d[bh * T + qi[half]] : 0.0f;
  }
  float dq[HS / 8][4];
#pragma unroll
  for (int nb = 0; nb < HS / 8; ++nb) dq[nb][0] = dq[nb][1] = dq[nb][2] = dq[nb][3] = 0.0f;
  for (int64_t kt = first; kt <= qt; ++kt) {
    const int64_t j0 = kt * kTile;
    cp_async_wait_all();
    __syncthreads();  // this key tile is in; every warp is done with the other buffer
    if (kt < qt) {
      load_rows<HS>(k, a.ldk, j0 + kTile, T, a.aligned, K(kt + 1));
      load_rows<HS>(v, a.ldv, j0 + kTile, T, a.aligned, V(kt + 1));
    }
    cp_async_commit();
    const bool masked = needs_mask(i0, j0, T, a.window);
    float s[kTile / 8][4], dp[kTile / 8][4];
    scores<HS>(Q, warp * kRows, K(kt), s);    // S as forward computes it
    scores<HS>(dO, warp * kRows, V(kt), dp);  // dP
    probabilities_and_ds(s, dp, scale2, [&](int nb, int e) {
      const int half = e / 2;
      const bool shown = !masked || visible(qi[half], j0 + nb * 8 + 2 * t + e % 2, T, a.window);
      return ElementRow{shown, row_lse2[half], row_d[half]};
    });
    uint32_t dsf[kTile / 16][4];
    accumulators_as_a<kTile>(dp, dsf);
    add_product<HS, kTile / 16>(dsf, K(kt), 0, dq);  // dQ += bf16(dS) K (scaled at the end)
  }
  write_rows<HS>(dq, a.scale, i0 + warp * kRows, T, gr.dq + b * T * gr.lddq + h * HS, gr.lddq);
#else
  __trap();  // built for a GPU without bf16 tensor cores: never launched there
#endif
}

// The most shared memory any of the three kernels asks for.
constexpr int64_t shared_bytes(int hs) {
  return std::max({forward_bytes(hs), key_bytes(hs), query_bytes(hs)});
}

// The head dims the kernels are built for: 32, 64, 96 and 128.
constexpr bool takes_head_dim(int64_t head_dim) {
  return head_dim >= 32 && head_dim <= kMaxHeadDim && head_dim % 32 == 0;
}

// fn(std::integral_constant<int, HS>{}) for a head_dim the kernels take.
template <typename Fn>
void with_head_dim(int64_t head_dim, Fn&& fn) {
  switch (head_dim) {
    case 32:
      fn(std::integral_constant<int, 32>{});
      break;
    case 64:
      fn(std::integral_constant<int, 64>{});
      break;
    case 96:
      fn(std::integral_constant<int, 96>{});
      break;
    case 128:
      fn(std::integral_constant<int, 128>{});
      break;
    default:
      throw InternalError("[attention] tensor-core kernels for head_dim " +
                          std::to_string(head_dim) + ": ask tensor_core_attention_supports first");
  }
}

}  // namespace colrow::kernels::cuda::tensor_cores
