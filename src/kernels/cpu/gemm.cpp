// cblas_sgemm with shapes checked up front (BLAS itself would only print and exit).
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
  cblas_sgemm(CblasRowMajor, trans_a == Trans::kNo ? CblasNoTrans : CblasTrans,
              trans_b == Trans::kNo ? CblasNoTrans : CblasTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a.data(),
              static_cast<int>(a.row_stride()), b.data(), static_cast<int>(b.row_stride()), beta,
              c.data(), static_cast<int>(c.row_stride()));
}

}  // namespace colrow::kernels::cpu
