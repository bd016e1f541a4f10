// Operand checks of the GEMM kernels, shared by kernels/cpu/gemm.cpp and
// kernels/cuda/gemm.cu: a, b, c are 2-d views with a contiguous last dim
// whose shapes chain, op(a): [m, k], op(b): [k, n], c: [m, n].
#pragma once

#include <cstdint>
#include <string>

#include "colrow/core/error.h"
#include "colrow/core/tensor.h"
#include "kernels/trans.h"

namespace colrow::kernels {

struct GemmDims {
  int64_t m, n, k;
};

inline void require_gemm_matrix(const Tensor& t, const char* what) {
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

// The sizes of c = alpha op(a) op(b) + beta c, or InternalError.
inline GemmDims check_gemm(Trans trans_a, Trans trans_b, const Tensor& a, const Tensor& b,
                           const Tensor& c) {
  require_gemm_matrix(a, "a");
  require_gemm_matrix(b, "b");
  require_gemm_matrix(c, "c");
  const int64_t m = trans_a == Trans::kNo ? a.size(0) : a.size(1);
  const int64_t k = trans_a == Trans::kNo ? a.size(1) : a.size(0);
  const int64_t kb = trans_b == Trans::kNo ? b.size(0) : b.size(1);
  const int64_t n = trans_b == Trans::kNo ? b.size(1) : b.size(0);
  if (k != kb || c.size(0) != m || c.size(1) != n) {
    throw InternalError("[gemm] shapes do not chain: op(a) [" + std::to_string(m) + ", " +
                        std::to_string(k) + "], op(b) [" + std::to_string(kb) + ", " +
                        std::to_string(n) + "], c " + shape_to_string(c.shape()));
  }
  return {m, n, k};
}

}  // namespace colrow::kernels
