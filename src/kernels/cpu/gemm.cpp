// cblas_sgemm with shapes checked up front (BLAS itself would only print and
// exit). A product with one row (decoding one token) goes to cblas_sgemv:
// OpenBLAS 0.3.21's sgemm packs the whole of b first, tripling the memory
// traffic of what is then a matrix-vector product bound by that traffic.
#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include "kernels/checks/gemm.h"

namespace colrow::kernels::cpu {

void gemm(Trans trans_a, Trans trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
          Tensor& c) {
  const auto [m, n, k] = check_gemm(trans_a, trans_b, a, b, c);
  if (m == 0 || n == 0) return;
  if (k == 0) {  // c = beta c: an empty sum (BLAS would want lda >= 1)
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c(i, j) = beta == 0.0f ? 0.0f : beta * c(i, j);
    }
    return;
  }
  if (m == 1) {
    // c[0, :] = alpha op(b)^T a[0, :] + beta c[0, :], with b [n, k] (kYes) or [k, n] (kNo)
    // row-major; a's row is strided when a is stored [k, 1] (kYes).
    const int a_step = trans_a == Trans::kNo ? 1 : static_cast<int>(a.row_stride());
    cblas_sgemv(CblasRowMajor, trans_b == Trans::kYes ? CblasNoTrans : CblasTrans,
                static_cast<int>(b.size(0)), static_cast<int>(b.size(1)), alpha, b.data(),
                static_cast<int>(b.row_stride()), a.data(), a_step, beta, c.data(), 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a == Trans::kNo ? CblasNoTrans : CblasTrans,
              trans_b == Trans::kNo ? CblasNoTrans : CblasTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a.data(),
              static_cast<int>(a.row_stride()), b.data(), static_cast<int>(b.row_stride()), beta,
              c.data(), static_cast<int>(c.row_stride()));
}

}  // namespace colrow::kernels::cpu
