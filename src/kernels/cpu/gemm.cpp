// cblas_sgemm with shapes checked up front (BLAS itself would only print and
// exit). OpenBLAS 0.3.21's sgemm packs the whole of b first, which costs more
// than the product itself when a has a few rows (decoding): a product with
// one fp32 row goes to cblas_sgemv, and 2 to kFewRows rows against a weight
// stored [n, k] (y = x W^T) to one dot product per output, reading each
// weight row once: GPT-2 124M's decode steps at tp 1 with 2 threads about
// 3x faster than through sgemm at batch 2 and 4 and 1.6x at 8; at one thread
// per rank 1.7x and 1.25x at batch 2 and 4, about even at 8
// (docs/performance.md, "A few rows without sgemm").
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

// Weight rows ahead of the one in use that rows_times_weights_t asks memory
// for. The loop reads weights from memory at a quarter of a plain read's rate
// on one thread (bench/few_rows_stream.cpp): memory and its multiply-adds
// barely overlap. Asking ahead made GPT-2 124M's batch-8 decode 1.2-1.4x
// faster at 2 threads (docs/performance.md, 2026-11-25).
constexpr int64_t kPrefetchRows = 2;
template <typename W>
inline void prefetch_row(const W* row, int64_t k) {
  const char* bytes = reinterpret_cast<const char*>(row);
  for (int64_t b = 0; b < k * static_cast<int64_t>(sizeof(W)); b += 64)
    __builtin_prefetch(bytes + b);
}

// out[i, j] = alpha sum_p x[i, p] w[j, p] + beta out[i, j] for i < m, j < n,
// with w fp32 or bf16 (its bits), read in place: each weight row crosses
// memory once and is read from L1 for the other rows, four rows of x at a
// time sharing each widened weight vector. Each output is one thread's fp32
// sum, its order fixed when compiled (the omp simd reduction's lanes), so the
// bits do not depend on the thread count (--deterministic holds without
// blocking); another build or -march may sum in other lanes.
template <typename W>
void rows_times_weights_t(int64_t m, int64_t n, int64_t k, float alpha, const float* x, int64_t ldx,
                          const W* w, int64_t ldw, float beta, float* out, int64_t ldc) {
  auto store = [&](int64_t i, int64_t j, float sum) {
    float& y = out[i * ldc + j];
    y = beta == 0.0f ? alpha * sum : alpha * sum + beta * y;
  };
#pragma omp parallel for schedule(static) if (n * k > kParallelElements)
  for (int64_t j = 0; j < n; ++j) {
    const W* row = w + j * ldw;
    if (j + kPrefetchRows < n) prefetch_row(row + kPrefetchRows * ldw, k);
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      const float *x0 = x + i * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
      float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
      for (int64_t p = 0; p < k; ++p) {
        const float v = widen(row[p]);
        s0 += x0[p] * v;
        s1 += x1[p] * v;
        s2 += x2[p] * v;
        s3 += x3[p] * v;
      }
      store(i, j, s0);
      store(i + 1, j, s1);
      store(i + 2, j, s2);
      store(i + 3, j, s3);
    }
    for (; i < m; ++i) {  // the rows left over, one at a time
      const float* xi = x + i * ldx;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t p = 0; p < k; ++p) sum += xi[p] * widen(row[p]);
      store(i, j, sum);
    }
  }
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
