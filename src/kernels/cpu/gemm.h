// GEMM through OpenBLAS's cblas_sgemm, row-major. Weights are stored [out, in]
// (nn.Linear's layout), so every linear-layer product is one call with the
// right transpose flags and nothing is ever transposed by copying:
//   forward      y  = x  W^T   gemm(kNo,  kYes, x,  W)
//   input grad   dx = dy W     gemm(kNo,  kNo,  dy, W)
//   weight grad  dW += dy^T x  gemm(kYes, kNo,  dy, x, beta = 1)
// Operands are 2-d views whose last dim is contiguous; the row stride is BLAS's
// leading dimension, so a rank's column block of a matrix is used in place.
#pragma once

#include "colrow/core/tensor.h"
#include "kernels/trans.h"

namespace colrow::kernels::cpu {

using kernels::Trans;  // cpu::Trans, as callers spell it

// c = alpha * op(a) op(b) + beta * c.
// op(a): [m, k], op(b): [k, n], c: [m, n].
void gemm(Trans trans_a, Trans trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
          Tensor& c);

// OpenBLAS's threaded sgemm splits c over its threads by their number, and
// the edges of the split change the bits of the result. Thread-invariant
// mode (--deterministic) splits c into fixed kInvariantBlock x kInvariantBlock
// blocks instead, each a single-threaded sgemm (sgemv for one row) on
// whichever thread takes it: the same bits at any thread count, at the cost
// of packing each operand once per block row or column (docs/performance.md).
constexpr int64_t kInvariantBlock = 256;

// Up to this many rows of a (from 2 in fp32, where one row is sgemv's), a
// product against weights stored [n, k] (the decode products) runs as
// register tiles of up to 8 rows over blocks of weight rows: each weight row
// read from memory once, bf16 widened in registers. OpenBLAS's sgemm packs
// the whole weight first and splits few rows badly over its threads: GPT-2
// 124M's decode steps are 1.2-3x faster this way at batch 8 to 32 and still
// 1.13x at 64 in one round, where sgemm takes over (docs/performance.md,
// "A few rows without sgemm").
constexpr int64_t kFewRows = 32;
void set_thread_invariant_gemm(bool on);

// 2 m n k: the floating-point operations of one such product.
inline double gemm_flops(int64_t m, int64_t n, int64_t k) {
  return 2.0 * m * n * k;
}

}  // namespace colrow::kernels::cpu
