// Fused causal attention on tensor cores (tensor_core_attention.h). Legend as
// flash_attention.cu: B batch, T seq (queries i, keys j), NH query heads, NKV
// key/value heads, HS head_dim, G = NH / NKV, S = scale Q K^T, P = softmax(S).
//
// A block is 4 warps over a tile of 64 queries (forward, dQ) or 64 keys (dK,
// dV); warp w owns rows [16 w, 16 w + 16) of the tile. Every product is WMMA
// 16 x 16 x 16 bf16 -> fp32 on operands in shared memory, rows padded to
// HS + 8 elements (the 16-byte rows a fragment load reads fall in different
// banks). A warp stores its fp32 score tiles [16][64] to shared memory, where
// its lanes apply the mask and the softmax: lane l takes row l / 2 and the
// columns of parity l % 2, so a row's max and sum combine two lanes.
// WMMA's register layout is opaque, so forward's output accumulator lives in
// shared memory too: rescaled there by the lanes, loaded, P V added, stored.
//
// forward, per (sequence, query head, query tile), over the key tiles it
//   meets: S -> online softmax (running max m and sum l of fp32 P per row)
//   -> O = alpha O + bf16(P) V; then O / l and lse = m + log l.
// dK, dV, per (sequence, KV head, key tile), over its query heads and the
//   query tiles it meets: S^T and dP^T again, P = exp(S - lse),
//   dS = P (dP - D), dV += bf16(P)^T dO, dK += bf16(dS)^T Q.
// dQ, per (sequence, query head, query tile), over the key tiles it meets:
//   S and dP again (S as forward computes it), dQ += bf16(dS) K.
// dK and dQ are scaled once at the end; every output is rounded to bf16 once.
#include "kernels/cuda/tensor_core_attention.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/cuda/attention_tiles.cuh"

namespace colrow::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;  // 128
constexpr int kFrag = 16;                 // WMMA's m = n = k
constexpr int kScoreLd = kTile + 4;       // fp32 score tiles [16][68]
constexpr int kProbLd = kTile + 8;        // bf16 P and dS tiles [16][72]
constexpr int kMaxHeadDim = 128;

// Shared-memory regions, in bytes: operand tiles [64][HS + 8] bf16, and per
// warp fp32 score tiles [16][68], bf16 probability tiles [16][72] and fp32
// row tiles [16][HS + 4]. Every size is a multiple of 128 bytes, so every
// region (and every fragment within it) keeps WMMA's 32-byte alignment.
constexpr int64_t operand_bytes(int hs) {
  return int64_t{kTile} * (hs + 8) * 2;
}
constexpr int64_t kScoreBytes = int64_t{kFrag} * kScoreLd * 4;
constexpr int64_t kProbBytes = int64_t{kFrag} * kProbLd * 2;
constexpr int64_t row_tile_bytes(int hs) {
  return int64_t{kFrag} * (hs + 4) * 4;
}
constexpr int64_t kRowValueBytes = int64_t{kTile} * 4;  // lse or D of a tile's 64 rows

// forward: Q, K, V; per warp S, P, O.
struct ForwardLayout {
  int64_t q, k, v, warps, per_warp, s, p, o, bytes;
  constexpr explicit ForwardLayout(int hs)
      : q(0),
        k(q + operand_bytes(hs)),
        v(k + operand_bytes(hs)),
        warps(v + operand_bytes(hs)),
        per_warp(kScoreBytes + kProbBytes + row_tile_bytes(hs)),
        s(0),
        p(s + kScoreBytes),
        o(p + kProbBytes),
        bytes(warps + kWarps * per_warp) {}
};
// dK, dV: K, V, Q, dO, lse, D; per warp S^T and dP^T (then the dK or dV
// rows on their way out), P^T and dS^T.
struct KeyLayout {
  int64_t k, v, q, dout, lse, d, warps, per_warp, s, dp, p, ds, bytes;
  constexpr explicit KeyLayout(int hs)
      : k(0),
        v(k + operand_bytes(hs)),
        q(v + operand_bytes(hs)),
        dout(q + operand_bytes(hs)),
        lse(dout + operand_bytes(hs)),
        d(lse + kRowValueBytes),
        warps(d + kRowValueBytes),
        per_warp(std::max(2 * kScoreBytes, row_tile_bytes(hs)) + 2 * kProbBytes),
        s(0),
        dp(s + kScoreBytes),
        p(std::max(2 * kScoreBytes, row_tile_bytes(hs))),
        ds(p + kProbBytes),
        bytes(warps + kWarps * per_warp) {}
};
// dQ: Q, dO, K, V; per warp S and dP (then the dQ rows), dS.
struct QueryLayout {
  int64_t q, dout, k, v, warps, per_warp, s, dp, ds, bytes;
  constexpr explicit QueryLayout(int hs)
      : q(0),
        dout(q + operand_bytes(hs)),
        k(dout + operand_bytes(hs)),
        v(k + operand_bytes(hs)),
        warps(v + operand_bytes(hs)),
        per_warp(std::max(2 * kScoreBytes, row_tile_bytes(hs)) + kProbBytes),
        s(0),
        dp(s + kScoreBytes),
        ds(std::max(2 * kScoreBytes, row_tile_bytes(hs))),
        bytes(warps + kWarps * per_warp) {}
};

// bf16 bits; `aligned` also covers dO's rows in backward.
using Bf16Operands = Operands<uint16_t>;

struct Gradients {
  const uint16_t* dout;
  int64_t lddo;
  const float* lse;  // [B, NH, T]
  const float* d;    // [B, NH, T]
  uint16_t *dq, *dk, *dv;
  int64_t lddq, lddk, lddv;
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define COLROW_TENSOR_CORES 1
#endif

#ifdef COLROW_TENSOR_CORES
using namespace nvcuda;
using Bf16 = __nv_bfloat16;
using RowA = wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, Bf16, wmma::row_major>;
using RowB = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, Bf16, wmma::row_major>;
using ColB = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, Bf16, wmma::col_major>;
using Acc = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

__device__ inline const Bf16* bf16s(const uint16_t* p) {
  return reinterpret_cast<const Bf16*>(p);
}

// Rows [r0, r0 + 64) of src (row stride ld, HS columns), zero past T rows,
// into an operand tile [64][HS + 8]: 8 elements per load where aligned.
template <int HS>
__device__ void load_rows(const uint16_t* src, int64_t ld, int64_t r0, int64_t T, bool aligned,
                          uint16_t* tile) {
  constexpr int LD = HS + 8;
  if (aligned) {
    constexpr int kChunks = HS / 8;
    for (int idx = threadIdx.x; idx < kTile * kChunks; idx += kThreads) {
      const int r = idx / kChunks, c = (idx % kChunks) * 8;
      uint4 x = make_uint4(0, 0, 0, 0);
      if (r0 + r < T) x = *reinterpret_cast<const uint4*>(src + (r0 + r) * ld + c);
      *reinterpret_cast<uint4*>(tile + r * LD + c) = x;
    }
  } else {
    for (int idx = threadIdx.x; idx < kTile * HS; idx += kThreads) {
      const int r = idx / HS, e = idx % HS;
      tile[r * LD + e] = r0 + r < T ? src[(r0 + r) * ld + e] : uint16_t{0};
    }
  }
}

// acc[n] = rows x cols^T for the 64 columns n * 16 + [0, 16): a warp's
// [16][64] scores from its 16 rows of one operand tile (rows + warp * 16)
// and every row of another. The operands stay in shared memory (fragments
// loaded as used), which keeps backward's registers for its accumulators.
template <int HS>
__device__ inline void scores(const uint16_t* rows, int warp, const uint16_t* cols,
                              Acc (&acc)[kTile / kFrag]) {
#pragma unroll
  for (int n = 0; n < kTile / kFrag; ++n) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
  for (int f = 0; f < HS / kFrag; ++f) {
    RowA a;
    wmma::load_matrix_sync(a, bf16s(rows + warp * kFrag * (HS + 8) + f * kFrag), HS + 8);
#pragma unroll
    for (int n = 0; n < kTile / kFrag; ++n) {
      ColB b;
      wmma::load_matrix_sync(b, bf16s(cols + n * kFrag * (HS + 8) + f * kFrag), HS + 8);
      wmma::mma_sync(acc[n], a, b, acc[n]);
    }
  }
}

__device__ inline void store_scores(const Acc (&acc)[kTile / kFrag], float* s) {
#pragma unroll
  for (int n = 0; n < kTile / kFrag; ++n) {
    wmma::store_matrix_sync(s + n * kFrag, acc[n], kScoreLd, wmma::mem_row_major);
  }
}

// acc[f] += probs [16][64] (bf16, row stride kProbLd) x tile [64][HS].
template <int HS>
__device__ inline void add_product(const uint16_t* probs, const uint16_t* tile,
                                   Acc (&acc)[HS / kFrag]) {
#pragma unroll
  for (int kk = 0; kk < kTile / kFrag; ++kk) {
    RowA a;
    wmma::load_matrix_sync(a, bf16s(probs + kk * kFrag), kProbLd);
#pragma unroll
    for (int f = 0; f < HS / kFrag; ++f) {
      RowB b;
      wmma::load_matrix_sync(b, bf16s(tile + kk * kFrag * (HS + 8) + f * kFrag), HS + 8);
      wmma::mma_sync(acc[f], a, b, acc[f]);
    }
  }
}

// A warp's [16][HS] fp32 rows times `mul`, rounded to bf16, into rows
// row0 + [0, 16) of dst where they exist (< T): through `rows` (its [16][HS +
// 4] shared scratch), one coalesced row at a time.
template <int HS>
__device__ void write_rows(const Acc (&acc)[HS / kFrag], float* rows, float mul, int64_t row0,
                           int64_t T, uint16_t* dst, int64_t ld) {
#pragma unroll
  for (int f = 0; f < HS / kFrag; ++f) {
    wmma::store_matrix_sync(rows + f * kFrag, acc[f], HS + 4, wmma::mem_row_major);
  }
  __syncwarp();
  const int lane = threadIdx.x % kWarp;
  for (int r = 0; r < kFrag && row0 + r < T; ++r) {
    for (int e = lane; e < HS; e += kWarp) {
      dst[(row0 + r) * ld + e] = narrow<uint16_t>(rows[r * (HS + 4) + e] * mul);
    }
  }
  __syncwarp();
}
#endif  // COLROW_TENSOR_CORES

template <int HS>
__global__ void __launch_bounds__(kThreads)
    tc_forward(Bf16Operands a, uint16_t* out, int64_t ldo, float* lse) {
#ifdef COLROW_TENSOR_CORES
  constexpr int KF = HS / kFrag, OLD = HS + 4;
  constexpr ForwardLayout L(HS);
  extern __shared__ __align__(128) char tc_shared[];  // WMMA wants 32-byte fragments
  char* shared = tc_shared;
  uint16_t* Q = reinterpret_cast<uint16_t*>(shared + L.q);
  uint16_t* K = reinterpret_cast<uint16_t*>(shared + L.k);
  uint16_t* V = reinterpret_cast<uint16_t*>(shared + L.v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  char* mine = shared + L.warps + warp * L.per_warp;
  float* S = reinterpret_cast<float*>(mine + L.s);        // [16][kScoreLd]
  uint16_t* P = reinterpret_cast<uint16_t*>(mine + L.p);  // [16][kProbLd]
  float* O = reinterpret_cast<float*>(mine + L.o);        // [16][OLD]

  const int64_t T = a.seq, bh = blockIdx.x, b = bh / a.n_head, h = bh % a.n_head;
  const int64_t g = h / a.group;
  const int64_t qt = gridDim.y - 1 - blockIdx.y;  // the tiles with the most keys start first
  const int64_t i0 = qt * kTile;
  const uint16_t* k = a.k + b * T * a.ldk + g * HS;
  const uint16_t* v = a.v + b * T * a.ldv + g * HS;
  load_rows<HS>(a.q + b * T * a.ldq + h * HS, a.ldq, i0, T, a.aligned, Q);
  for (int idx = lane; idx < kFrag * OLD; idx += kWarp) O[idx] = 0.0f;

  const int r = lane / 2, parity = lane % 2;  // this lane's row and columns
  const int64_t qi = i0 + warp * kFrag + r;
  float m = -INFINITY, l = 0.0f;  // the row's running max and sum
  for (int64_t kt = first_key_tile(qt, a.window); kt <= qt; ++kt) {
    const int64_t j0 = kt * kTile;
    __syncthreads();  // every warp is done with the last tile's K and V
    load_rows<HS>(k, a.ldk, j0, T, a.aligned, K);
    load_rows<HS>(v, a.ldv, j0, T, a.aligned, V);
    __syncthreads();
    Acc s[kTile / kFrag];
    scores<HS>(Q, warp, K, s);
    store_scores(s, S);
    __syncwarp();
    float x[kTile / 2];  // scale x scores of this lane's columns; -inf where masked
    float tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < kTile / 2; ++c) {
      const int col = parity + 2 * c;
      x[c] = visible(qi, j0 + col, T, a.window) ? S[r * kScoreLd + col] * a.scale : -INFINITY;
      tile_max = fmaxf(tile_max, x[c]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    // A row with no visible key yet keeps m = -inf, l = 0, O = 0.
    const float alpha = m_new == -INFINITY ? 1.0f : expf(m - m_new);
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kTile / 2; ++c) {
      const float p = x[c] == -INFINITY ? 0.0f : expf(x[c] - m_new);
      P[r * kProbLd + parity + 2 * c] = narrow<uint16_t>(p);
      sum += p;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    for (int e = parity; e < HS; e += 2) O[r * OLD + e] *= alpha;
    __syncwarp();
    Acc o[KF];
#pragma unroll
    for (int f = 0; f < KF; ++f) {
      wmma::load_matrix_sync(o[f], O + f * kFrag, OLD, wmma::mem_row_major);
    }
    add_product<HS>(P, V, o);  // O += P V over the tile's keys
    // Every lane's loads of O before any lane's store over them: the WMMA
    // ops wait for the warp's lanes but are not documented as fences, and
    // the fragments' layout is opaque (found on a CPU emulation under TSan).
    __syncwarp();
#pragma unroll
    for (int f = 0; f < KF; ++f) {
      wmma::store_matrix_sync(O + f * kFrag, o[f], OLD, wmma::mem_row_major);
    }
    __syncwarp();
  }
  if (parity == 0 && qi < T) lse[bh * T + qi] = m + logf(l);
  const float inv = 1.0f / l;  // l >= 1 where the row exists: its max contributes exp(0)
  const int64_t row0 = i0 + warp * kFrag;
  uint16_t* dst = out + b * T * ldo + h * HS;
  for (int rr = 0; rr < kFrag; ++rr) {
    const float row_inv = __shfl_sync(0xffffffffu, inv, 2 * rr);
    if (row0 + rr >= T) break;
    for (int e = lane; e < HS; e += kWarp) {
      dst[(row0 + rr) * ldo + e] = narrow<uint16_t>(O[rr * OLD + e] * row_inv);
    }
  }
#else
  __trap();  // built for a GPU without bf16 tensor cores: never launched there
#endif
}

template <int HS>
__global__ void __launch_bounds__(kThreads) tc_backward_kv(Bf16Operands a, Gradients gr) {
#ifdef COLROW_TENSOR_CORES
  constexpr int KF = HS / kFrag;
  constexpr KeyLayout L(HS);
  extern __shared__ __align__(128) char tc_shared[];  // WMMA wants 32-byte fragments
  char* shared = tc_shared;
  uint16_t* K = reinterpret_cast<uint16_t*>(shared + L.k);
  uint16_t* V = reinterpret_cast<uint16_t*>(shared + L.v);
  uint16_t* Q = reinterpret_cast<uint16_t*>(shared + L.q);  // each query tile's
  uint16_t* dO = reinterpret_cast<uint16_t*>(shared + L.dout);
  float* lse = reinterpret_cast<float*>(shared + L.lse);  // [64] the query tile's
  float* D = reinterpret_cast<float*>(shared + L.d);      // [64]
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  char* mine = shared + L.warps + warp * L.per_warp;
  float* St = reinterpret_cast<float*>(mine + L.s);          // [16 keys][kScoreLd queries]
  float* dPt = reinterpret_cast<float*>(mine + L.dp);        // [16][kScoreLd]
  uint16_t* Pt = reinterpret_cast<uint16_t*>(mine + L.p);    // [16][kProbLd]
  uint16_t* dSt = reinterpret_cast<uint16_t*>(mine + L.ds);  // [16][kProbLd]

  const int64_t T = a.seq, NH = a.n_head, n_kv = a.n_head / a.group;
  const int64_t bg = blockIdx.x, b = bg / n_kv, g = bg % n_kv;
  const int64_t kt = blockIdx.y, j0 = kt * kTile, query_tiles = key_tiles(T);
  load_rows<HS>(a.k + b * T * a.ldk + g * HS, a.ldk, j0, T, a.aligned, K);
  load_rows<HS>(a.v + b * T * a.ldv + g * HS, a.ldv, j0, T, a.aligned, V);

  const int r = lane / 2, parity = lane % 2;  // this lane's key (row of S^T) and query columns
  const int64_t kj = j0 + warp * kFrag + r;
  Acc dk[KF], dv[KF];
#pragma unroll
  for (int f = 0; f < KF; ++f) {
    wmma::fill_fragment(dk[f], 0.0f);
    wmma::fill_fragment(dv[f], 0.0f);
  }
  for (int64_t rep = 0; rep < a.group; ++rep) {  // the query heads of KV head g, in order
    const int64_t h = g * a.group + rep;
    const float* lse_h = gr.lse + (b * NH + h) * T;
    const float* d_h = gr.d + (b * NH + h) * T;
    for (int64_t qt = kt; qt < query_tiles && tiles_meet(kt, qt, a.window); ++qt) {
      const int64_t i0 = qt * kTile;
      __syncthreads();  // every warp is done with the last query tile
      load_rows<HS>(a.q + b * T * a.ldq + h * HS, a.ldq, i0, T, a.aligned, Q);
      load_rows<HS>(gr.dout + b * T * gr.lddo + h * HS, gr.lddo, i0, T, a.aligned, dO);
      for (int idx = threadIdx.x; idx < kTile; idx += kThreads) {
        lse[idx] = i0 + idx < T ? lse_h[i0 + idx] : 0.0f;
        D[idx] = i0 + idx < T ? d_h[i0 + idx] : 0.0f;
      }
      __syncthreads();
      Acc s[kTile / kFrag];
      scores<HS>(K, warp, Q, s);  // S^T: this warp's keys x the tile's queries
      store_scores(s, St);
      scores<HS>(V, warp, dO, s);  // dP^T
      store_scores(s, dPt);
      __syncwarp();
#pragma unroll 4
      for (int c = 0; c < kTile / 2; ++c) {
        const int col = parity + 2 * c;
        const float p = visible(i0 + col, kj, T, a.window)
                            ? expf(St[r * kScoreLd + col] * a.scale - lse[col])
                            : 0.0f;
        Pt[r * kProbLd + col] = narrow<uint16_t>(p);
        dSt[r * kProbLd + col] = narrow<uint16_t>(p * (dPt[r * kScoreLd + col] - D[col]));
      }
      __syncwarp();
      add_product<HS>(Pt, dO, dv);  // dV += P^T dO
      add_product<HS>(dSt, Q, dk);  // dK += dS^T Q (times scale at the end)
    }
  }
  __syncwarp();  // the warp's score tiles are free for the rows on their way out
  float* rows = St;
  const int64_t row0 = j0 + warp * kFrag;
  write_rows<HS>(dk, rows, a.scale, row0, T, gr.dk + b * T * gr.lddk + g * HS, gr.lddk);
  write_rows<HS>(dv, rows, 1.0f, row0, T, gr.dv + b * T * gr.lddv + g * HS, gr.lddv);
#else
  __trap();  // built for a GPU without bf16 tensor cores: never launched there
#endif
}

template <int HS>
__global__ void __launch_bounds__(kThreads) tc_backward_q(Bf16Operands a, Gradients gr) {
#ifdef COLROW_TENSOR_CORES
  constexpr int KF = HS / kFrag;
  constexpr QueryLayout L(HS);
  extern __shared__ __align__(128) char tc_shared[];  // WMMA wants 32-byte fragments
  char* shared = tc_shared;
  uint16_t* Q = reinterpret_cast<uint16_t*>(shared + L.q);
  uint16_t* dO = reinterpret_cast<uint16_t*>(shared + L.dout);
  uint16_t* K = reinterpret_cast<uint16_t*>(shared + L.k);  // each key tile's
  uint16_t* V = reinterpret_cast<uint16_t*>(shared + L.v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  char* mine = shared + L.warps + warp * L.per_warp;
  float* S = reinterpret_cast<float*>(mine + L.s);          // [16 queries][kScoreLd keys]
  float* dP = reinterpret_cast<float*>(mine + L.dp);        // [16][kScoreLd]
  uint16_t* dS = reinterpret_cast<uint16_t*>(mine + L.ds);  // [16][kProbLd]

  const int64_t T = a.seq, bh = blockIdx.x, b = bh / a.n_head, h = bh % a.n_head;
  const int64_t g = h / a.group;
  const int64_t qt = gridDim.y - 1 - blockIdx.y, i0 = qt * kTile;
  load_rows<HS>(a.q + b * T * a.ldq + h * HS, a.ldq, i0, T, a.aligned, Q);
  load_rows<HS>(gr.dout + b * T * gr.lddo + h * HS, gr.lddo, i0, T, a.aligned, dO);

  const int r = lane / 2, parity = lane % 2;
  const int64_t qi = i0 + warp * kFrag + r;
  const float row_lse = qi < T ? gr.lse[bh * T + qi] : 0.0f;
  const float row_d = qi < T ? gr.d[bh * T + qi] : 0.0f;
  const uint16_t* k = a.k + b * T * a.ldk + g * HS;
  const uint16_t* v = a.v + b * T * a.ldv + g * HS;
  Acc dq[KF];
#pragma unroll
  for (int f = 0; f < KF; ++f) wmma::fill_fragment(dq[f], 0.0f);
  for (int64_t kt = first_key_tile(qt, a.window); kt <= qt; ++kt) {
    const int64_t j0 = kt * kTile;
    __syncthreads();  // every warp is done with the last key tile
    load_rows<HS>(k, a.ldk, j0, T, a.aligned, K);
    load_rows<HS>(v, a.ldv, j0, T, a.aligned, V);
    __syncthreads();
    Acc s[kTile / kFrag];
    scores<HS>(Q, warp, K, s);  // S as forward computes it
    store_scores(s, S);
    scores<HS>(dO, warp, V, s);  // dP
    store_scores(s, dP);
    __syncwarp();
#pragma unroll 4
    for (int c = 0; c < kTile / 2; ++c) {
      const int col = parity + 2 * c;
      const float p = visible(qi, j0 + col, T, a.window)
                          ? expf(S[r * kScoreLd + col] * a.scale - row_lse)
                          : 0.0f;
      dS[r * kProbLd + col] = narrow<uint16_t>(p * (dP[r * kScoreLd + col] - row_d));
    }
    __syncwarp();
    add_product<HS>(dS, K, dq);  // dQ += dS K (times scale at the end)
  }
  __syncwarp();
  write_rows<HS>(dq, S, a.scale, i0 + warp * kFrag, T, gr.dq + b * T * gr.lddq + h * HS, gr.lddq);
#else
  __trap();  // built for a GPU without bf16 tensor cores: never launched there
#endif
}

int64_t shared_bytes(int hs) {
  return std::max({ForwardLayout(hs).bytes, KeyLayout(hs).bytes, QueryLayout(hs).bytes});
}

// kernel<<<grid, kThreads, bytes, stream>>>(args...), its shared memory allowed.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, int64_t bytes, cudaStream_t stream,
            Args... args) {
  allow_shared_bytes(kernel, bytes);
  kernel<<<grid, kThreads, bytes, stream>>>(args...);
  COLROW_CUDA_CHECK_LAUNCH();
}

template <int HS>
void forward(const Bf16Operands& a, int64_t batch, uint16_t* out, int64_t ldo, float* lse,
             cudaStream_t stream) {
  launch(tc_forward<HS>,
         dim3(static_cast<unsigned>(batch * a.n_head), static_cast<unsigned>(key_tiles(a.seq))),
         ForwardLayout(HS).bytes, stream, a, out, ldo, lse);
}

template <int HS>
void backward(const Bf16Operands& a, int64_t batch, const Gradients& gr, cudaStream_t stream) {
  const unsigned tiles = static_cast<unsigned>(key_tiles(a.seq));
  launch(tc_backward_kv<HS>, dim3(static_cast<unsigned>(batch * (a.n_head / a.group)), tiles),
         KeyLayout(HS).bytes, stream, a, gr);
  launch(tc_backward_q<HS>, dim3(static_cast<unsigned>(batch * a.n_head), tiles),
         QueryLayout(HS).bytes, stream, a, gr);
}

// fn(std::integral_constant<int, HS>{}) for a supported head_dim.
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

}  // namespace

bool tensor_core_attention_supports(int64_t head_dim, int device) {
  if (head_dim < 32 || head_dim > kMaxHeadDim || head_dim % 32 != 0) return false;
  int major = 0, optin = 0;
  COLROW_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  COLROW_CUDA_CHECK(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (major < 8 || shared_bytes(static_cast<int>(head_dim)) > optin) return false;
  // The code the GPU runs must have been compiled for sm_80 or newer too (a
  // build for an older architecture JITs kernels whose bodies trap).
  colrow::cuda::compute_stream(device);  // makes `device` current
  cudaFuncAttributes built{};
  const cudaError_t found = cudaFuncGetAttributes(&built, tc_forward<64>);
  if (found == cudaErrorNoKernelImageForDevice || found == cudaErrorInvalidDeviceFunction) {
    cudaGetLastError();  // no image this GPU can run: the fp32 kernels serve (clears the error)
    return false;
  }
  COLROW_CUDA_CHECK(found);
  return built.ptxVersion >= 80;
}

void tensor_core_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const AttentionDims& d, int64_t window, Tensor& lse,
                                   Tensor& out) {
  cudaStream_t stream = colrow::cuda::compute_stream(out.device().index);
  const Bf16Operands a = operands<uint16_t>(q, k, v, d, window);
  uint16_t* o = static_cast<uint16_t*>(out.raw_data());
  with_head_dim(d.head_dim, [&](auto hs) {
    forward<decltype(hs)::value>(a, d.batch, o, out.row_stride(), lse.data(), stream);
  });
}

void tensor_core_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, const Tensor& dout,
                                    const AttentionDims& d, int64_t window, Tensor& dq, Tensor& dk,
                                    Tensor& dv, float* row_dots) {
  cudaStream_t stream = colrow::cuda::compute_stream(dq.device().index);
  const auto* o = static_cast<const uint16_t*>(out.raw_data());
  const auto* g = static_cast<const uint16_t*>(dout.raw_data());
  launch_rows_dot(g, dout.row_stride(), o, out.row_stride(), d.batch * d.seq, d.seq, d.n_head,
                  d.head_dim, row_dots, stream);
  Bf16Operands a = operands<uint16_t>(q, k, v, d, window);
  a.aligned = a.aligned && aligned_rows(dout);
  const Gradients gr{g,
                     dout.row_stride(),
                     lse.data(),
                     row_dots,
                     static_cast<uint16_t*>(dq.raw_data()),
                     static_cast<uint16_t*>(dk.raw_data()),
                     static_cast<uint16_t*>(dv.raw_data()),
                     dq.row_stride(),
                     dk.row_stride(),
                     dv.row_stride()};
  with_head_dim(d.head_dim,
                [&](auto hs) { backward<decltype(hs)::value>(a, d.batch, gr, stream); });
}

}  // namespace colrow::kernels::cuda
