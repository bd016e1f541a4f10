// cblas_sgemm with shapes checked up front (BLAS itself would only print and exit).
#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include "colrow/core/error.h"

namespace colrow::kernels::cpu {
namespace {

void require_matrix(const Tensor& t, const char* what) {
  if (t.ndim() != 2) {
    throw InternalError(std::string("[gemm] ") + what + " must be 2-d, got shape " +
                        shape_to_string(t.shape()));
  }
  if (t.numel() == 0) return;  // empty: strides are meaningless
  if (t.stride(1) != 1 || t.stride(0) < t.size(1)) {
    throw InternalError(std::string("[gemm] ") + what +
                        " must be a 2-d view with a contiguous last dim, got shape " +
                        shape_to_string(t.shape()));
  }
}

}  // namespace

void gemm(Trans trans_a, Trans trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
          Tensor& c) {
  require_matrix(a, "a");
  require_matrix(b, "b");
  require_matrix(c, "c");
  const int64_t m = trans_a == Trans::kNo ? a.size(0) : a.size(1);
  const int64_t k = trans_a == Trans::kNo ? a.size(1) : a.size(0);
  const int64_t kb = trans_b == Trans::kNo ? b.size(0) : b.size(1);
  const int64_t n = trans_b == Trans::kNo ? b.size(1) : b.size(0);
  if (k != kb || c.size(0) != m || c.size(1) != n) {
    throw InternalError("[gemm] shapes do not chain: op(a) [" + std::to_string(m) + ", " +
                        std::to_string(k) + "], op(b) [" + std::to_string(kb) + ", " +
                        std::to_string(n) + "], c " + shape_to_string(c.shape()));
  }
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
