// cblas_sgemm with shapes checked up front (BLAS itself would only print and
// exit). OpenBLAS 0.3.21's sgemm packs the whole of b first, which costs more
// than the product itself when a has a few rows (decoding): a product with
// one fp32 row goes to cblas_sgemv, and 2 to kFewRows rows against a weight
// stored [n, k] (y = x W^T) to register tiles that read each weight row from
// memory once (rows_times_weights_t below; docs/performance.md, "A few rows
// without sgemm").
// bf16 operands are widened and go to sgemm, except for the products with up
// to kFewRows rows against a weight stored [n, k], which read the bf16
// weight as it is, widening each element in registers: the weights then
// cross memory once at 2 bytes each, where widening them whole first would
// write and read an fp32 copy (5x the bytes), and OpenBLAS has no bf16
// kernel to call (Debian's 0.3.21 does not export cblas_sbgemm/sbgemv).
#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <utility>

#include "colrow/core/bfloat16.h"
#include "kernels/checks/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/mixed_precision.h"

namespace colrow::kernels::cpu {
namespace {

std::atomic<bool> g_thread_invariant{false};

// One BLAS call on raw row-major operands: op(a) [m, k] with leading
// dimension lda, op(b) [k, n] with ldb, c [m, n] with ldc. OpenBLAS threads
// it, unless called inside an OpenMP parallel region (one thread then).
void blas_product(Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc) {
  if (m == 1) {
    // c[0, :] = alpha op(b)^T a[0, :] + beta c[0, :], with b [n, k] (kYes) or [k, n] (kNo)
    // row-major; a's row is strided when a is stored [k, 1] (kYes).
    const int a_step = trans_a == Trans::kNo ? 1 : static_cast<int>(lda);
    const bool b_rows_are_n = trans_b == Trans::kYes;
    cblas_sgemv(CblasRowMajor, b_rows_are_n ? CblasNoTrans : CblasTrans,
                static_cast<int>(b_rows_are_n ? n : k), static_cast<int>(b_rows_are_n ? k : n),
                alpha, b, static_cast<int>(ldb), a, a_step, beta, c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a == Trans::kNo ? CblasNoTrans : CblasTrans,
              trans_b == Trans::kNo ? CblasNoTrans : CblasTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// The few-rows product's vectors, GCC's (and Clang's) vector extensions as
// wide as the target's registers. Each output sums its products lane by
// lane, then the lanes in a fixed order (lane_sum): the lanes are fixed when
// compiled, so the bits do not depend on the thread count or on the other
// rows in the product (--deterministic holds without blocking); another
// -march may sum in other lanes.
#if defined(__AVX512F__)
constexpr int kLanes = 16, kVectorRegisters = 32;
#elif defined(__AVX__)
constexpr int kLanes = 8, kVectorRegisters = 16;
#else
constexpr int kLanes = 4, kVectorRegisters = 16;
#endif
using FloatLanes = float __attribute__((vector_size(kLanes * sizeof(float))));
using Bf16Lanes = uint16_t __attribute__((vector_size(kLanes * sizeof(uint16_t))));
using BitLanes = uint32_t __attribute__((vector_size(kLanes * sizeof(uint32_t))));

inline FloatLanes load_lanes(const float* p) {
  FloatLanes v;
  std::memcpy(&v, p, sizeof v);  // unaligned: views start anywhere
  return v;
}
inline FloatLanes load_lanes(const uint16_t* p) {  // bf16 bits, widened exactly
  Bf16Lanes bf16;
  std::memcpy(&bf16, p, sizeof bf16);
  const BitLanes bits = __builtin_convertvector(bf16, BitLanes) << 16;
  FloatLanes v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}
// Halves added until one lane is left: lane i + kLanes/2 into lane i, and so on.
inline float lane_sum(FloatLanes v) {
  float lanes[kLanes];
  std::memcpy(lanes, &v, sizeof lanes);
  for (int half = kLanes / 2; half > 0; half /= 2) {
    for (int i = 0; i < half; ++i) lanes[i] += lanes[i + half];
  }
  return lanes[0];
}

// How far ahead of its reads the loop asks memory for weights. The loop
// multiplies too slowly for the hardware prefetcher to run far enough ahead
// by itself: on one thread of this machine, GPT-2 124M's weights stream at
// 5-32 GB/s without it and 7-39 with it, against 37 for a plain read
// (bench/few_rows_stream.cpp, docs/performance.md 2026-11-25).
constexpr int64_t kPrefetchBytes = 6144;

// sums[c][r] = sum_p x[r, p] w[c, p] for kRows rows of x and kWeightRows
// weight rows (fp32 or bf16 bits, read in place): each weight vector is
// loaded once for all rows, each x vector once for all weight rows.
template <int kRows, int kWeightRows, typename W>
inline void dot_tile(int64_t k, const float* x, int64_t ldx, const W* w, int64_t ldw,
                     float (&sums)[kWeightRows][kRows]) {
  static_assert(kRows * kWeightRows + kWeightRows + 1 <= kVectorRegisters,
                "the tile's sums, weights and one x vector fit the registers");
  FloatLanes acc[kWeightRows][kRows] = {};
  int64_t p = 0;
  for (; p + kLanes <= k; p += kLanes) {
    FloatLanes weights[kWeightRows];
    for (int c = 0; c < kWeightRows; ++c) {
      const W* at = w + c * ldw + p;
      if (p * sizeof(W) % 64 == 0) {  // once per cache line
        __builtin_prefetch(reinterpret_cast<const char*>(at) + kPrefetchBytes / kWeightRows);
      }
      weights[c] = load_lanes(at);
    }
    for (int r = 0; r < kRows; ++r) {
      const FloatLanes xr = load_lanes(x + r * ldx + p);
      for (int c = 0; c < kWeightRows; ++c) acc[c][r] += xr * weights[c];
    }
  }
  for (int c = 0; c < kWeightRows; ++c) {
    for (int r = 0; r < kRows; ++r) {
      float sum = lane_sum(acc[c][r]);
      for (int64_t q = p; q < k; ++q) sum += x[r * ldx + q] * widen(w[c * ldw + q]);
      sums[c][r] = sum;
    }
  }
}

// out[i, j] = alpha sum_p x[i, p] w[j, p] + beta out[i, j] for kRows rows of
// x and the weight rows j in [j0, j1). While the rows of x fit in L1
// (decoding's shapes but the largest), one weight row at a time; past that,
// two, so that each x vector read from L2 serves twice the multiply-adds.
// On one thread of this machine (bench/few_rows_stream.cpp), GPT-2's k 3072:
// fp32 weights at 4 rows (48 KiB of x) 19 -> 25 GB/s, at 8 rows 10 -> 15-18;
// bf16 weights gain at 8 rows (5 -> 10-11) but lose at 4 (20 -> 17), hence
// their threshold twice as high.
template <int kRows, typename W>
void tile_rows(int64_t j0, int64_t j1, int64_t k, float alpha, const float* x, int64_t ldx,
               const W* w, int64_t ldw, float beta, float* out, int64_t ldc) {
  constexpr int64_t kPairAboveBytes = (sizeof(W) == sizeof(float) ? 32 : 64) << 10;
  constexpr bool kPairs = kRows * 2 + 3 <= kVectorRegisters;
  const bool pairs = kPairs && kRows * k * static_cast<int64_t>(sizeof(float)) > kPairAboveBytes;
  auto store = [&](int64_t j, const float* sums) {
    for (int r = 0; r < kRows; ++r) {
      float& y = out[r * ldc + j];
      y = beta == 0.0f ? alpha * sums[r] : alpha * sums[r] + beta * y;
    }
  };
  int64_t j = j0;
  if constexpr (kPairs) {
    for (; pairs && j + 2 <= j1; j += 2) {
      float sums[2][kRows];
      dot_tile<kRows, 2>(k, x, ldx, w + j * ldw, ldw, sums);
      store(j, sums[0]);
      store(j + 1, sums[1]);
    }
  }
  for (; j < j1; ++j) {
    float sums[1][kRows];
    dot_tile<kRows, 1>(k, x, ldx, w + j * ldw, ldw, sums);
    store(j, sums[0]);
  }
}

// Rows of x per tile: a tile's sums stay in registers up to this many.
constexpr int64_t kTileRows = 8;
// Weight bytes per block: more rows of x than a tile holds go over a block
// in tiles one after another, the block read from memory by the first and
// from L2 by the others.
constexpr int64_t kWeightBlockBytes = 96 << 10;

// The same for 1 <= m <= kFewRows rows of x and every j < n: the weight rows
// in blocks, threads over the blocks, each block's rows of x in tiles of up
// to kTileRows. An output's sum is its own tile's, whichever tile and thread.
template <typename W, size_t... kRows>
void rows_times_weights_t(std::index_sequence<kRows...>, int64_t m, int64_t n, int64_t k,
                          float alpha, const float* x, int64_t ldx, const W* w, int64_t ldw,
                          float beta, float* out, int64_t ldc) {
  using Tile = void (*)(int64_t, int64_t, int64_t, float, const float*, int64_t, const W*, int64_t,
                        float, float*, int64_t);
  static constexpr Tile kTiles[] = {&tile_rows<static_cast<int>(kRows) + 1, W>...};
  const int64_t block =
      std::max<int64_t>(2, kWeightBlockBytes / (k * static_cast<int64_t>(sizeof(W))) / 2 * 2);
  const int64_t blocks = ceil_div(n, block);
#pragma omp parallel for schedule(static) if (n * k > kParallelElements)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j0 = b * block, j1 = std::min(n, j0 + block);
    for (int64_t i = 0; i < m; i += kTileRows) {
      const int64_t rows = std::min(kTileRows, m - i);
      kTiles[rows - 1](j0, j1, k, alpha, x + i * ldx, ldx, w, ldw, beta, out + i * ldc, ldc);
    }
  }
}
template <typename W>
void rows_times_weights_t(int64_t m, int64_t n, int64_t k, float alpha, const float* x, int64_t ldx,
                          const W* w, int64_t ldw, float beta, float* out, int64_t ldc) {
  rows_times_weights_t(std::make_index_sequence<kTileRows>(), m, n, k, alpha, x, ldx, w, ldw, beta,
                       out, ldc);
}

// c32 = alpha a w^T + beta c32 for a few rows of a against w [n, k] in its own
// dtype; a bf16 a is widened once (m k elements).
void few_rows_times_weights_t(float alpha, const Tensor& a, const Tensor& w, float beta,
                              Tensor& c32) {
  const int64_t m = a.size(0), k = a.size(1), n = w.size(0);
  const Tensor a32 = a.dtype() == DType::kF32 ? a : a.to(DType::kF32);
  if (w.dtype() == DType::kBF16) {
    rows_times_weights_t(m, n, k, alpha, a32.data(), a32.row_stride(), w.bf16_data(),
                         w.row_stride(), beta, c32.data(), c32.row_stride());
  } else {
    rows_times_weights_t(m, n, k, alpha, a32.data(), a32.row_stride(), w.data(), w.row_stride(),
                         beta, c32.data(), c32.row_stride());
  }
}

// Whether the product is a few rows of a against weights stored [n, k], which
// few_rows_times_weights_t takes: from one bf16 row, from two fp32 rows (one
// fp32 row is sgemv's).
bool takes_few_rows(int64_t m, int64_t k, Trans trans_a, Trans trans_b, DType dtype) {
  const int64_t fewest = dtype == DType::kF32 ? 2 : 1;
  return m >= fewest && m <= kFewRows && k > 0 && trans_a == Trans::kNo && trans_b == Trans::kYes;
}

}  // namespace

void set_thread_invariant_gemm(bool on) {
  g_thread_invariant = on;
}

void gemm(Trans trans_a, Trans trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
          Tensor& c) {
  // Plain names, not a structured binding: OpenMP's loop below uses them,
  // and C++17 does not let a parallel region capture a binding (clang refuses).
  const auto dims = check_gemm(trans_a, trans_b, a, b, c);
  const int64_t m = dims.m, n = dims.n, k = dims.k;
  if (m == 0 || n == 0) return;
  if (a.dtype() != DType::kF32) {
    // bf16 operands: their products are exact in fp32, so widening them and
    // running sgemm is a bf16 GEMM with fp32 accumulation, as a GPU's; a bf16
    // c is widened (when beta reads it) and rounded back once.
    const bool native = takes_few_rows(m, k, trans_a, trans_b, a.dtype());
    auto product_into = [&](Tensor& c32) {
      if (native) {
        few_rows_times_weights_t(alpha, a, b, beta, c32);
      } else {
        gemm(trans_a, trans_b, alpha, a.to(DType::kF32), b.to(DType::kF32), beta, c32);
      }
    };
    if (c.dtype() == DType::kF32) {
      product_into(c);
      return;
    }
    Tensor c32 = beta == 0.0f ? Tensor::empty(c.shape()) : c.to(DType::kF32);
    product_into(c32);
    store_rounded(c32, c);
    return;
  }
  if (k == 0) {  // c = beta c: an empty sum (BLAS would want lda >= 1)
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c(i, j) = beta == 0.0f ? 0.0f : beta * c(i, j);
    }
    return;
  }
  if (takes_few_rows(m, k, trans_a, trans_b, DType::kF32)) {
    few_rows_times_weights_t(alpha, a, b, beta, c);  // the same bits at any thread count
    return;
  }
  const int64_t lda = a.row_stride(), ldb = b.row_stride(), ldc = c.row_stride();
  if (!g_thread_invariant) {
    blas_product(trans_a, trans_b, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(),
                 ldc);
    return;
  }
  const int64_t row_blocks = (m + kInvariantBlock - 1) / kInvariantBlock;
  const int64_t col_blocks = (n + kInvariantBlock - 1) / kInvariantBlock;
#pragma omp parallel for schedule(static)
  for (int64_t block = 0; block < row_blocks * col_blocks; ++block) {
    const int64_t i0 = block / col_blocks * kInvariantBlock;
    const int64_t j0 = block % col_blocks * kInvariantBlock;
    const int64_t rows = std::min(kInvariantBlock, m - i0);
    const int64_t cols = std::min(kInvariantBlock, n - j0);
    // Rows i0.. of op(a): stored [m, k] (kNo) or [k, m] (kYes); columns
    // j0.. of op(b): stored [k, n] (kNo) or [n, k] (kYes).
    const float* a_block = a.data() + (trans_a == Trans::kNo ? i0 * lda : i0);
    const float* b_block = b.data() + (trans_b == Trans::kNo ? j0 : j0 * ldb);
    blas_product(trans_a, trans_b, rows, cols, k, alpha, a_block, lda, b_block, ldb, beta,
                 c.data() + i0 * ldc + j0, ldc);
  }
}

}  // namespace colrow::kernels::cpu
