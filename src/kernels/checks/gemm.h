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

// Mixed precision: a and b of one dtype; c fp32, or bf16 when a and b are
// (the product accumulates in fp32 and is rounded into c once).
inline void check_gemm_dtypes(const Tensor& a, const Tensor& b, const Tensor& c) {
  if (a.dtype() != b.dtype() || (a.dtype() == DType::kF32 && c.dtype() != DType::kF32)) {
    throw InternalError(std::string("[gemm] dtypes a ") + dtype_name(a.dtype()) + ", b " +
                        dtype_name(b.dtype()) + ", c " + dtype_name(c.dtype()) +
                        ": a and b must share a dtype, and c may be bf16 only when they are");
  }
}

// The sizes of c = alpha op(a) op(b) + beta c, or InternalError.
inline GemmDims check_gemm(Trans trans_a, Trans trans_b, const Tensor& a, const Tensor& b,
                           const Tensor& c) {
  require_gemm_matrix(a, "a");
  require_gemm_matrix(b, "b");
  require_gemm_matrix(c, "c");
  check_gemm_dtypes(a, b, c);
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

// A linear layer's dtypes (kernels/cpu/linear.h): forward takes x, w and b of
// one dtype and writes y in it; the weight gradients read dy and x of one
// dtype and accumulate into fp32 dw and db (the masters' gradients).
inline void check_linear_dtypes(const char* what, const Tensor& in0, const Tensor& in1,
                                const Tensor& out0, const Tensor& out1, bool grads) {
  const DType want = grads ? DType::kF32 : in0.dtype();
  if (in1.dtype() != in0.dtype() || out0.dtype() != want || out1.dtype() != want) {
    throw InternalError(std::string("[linear] ") + what + ": dtypes " + dtype_name(in0.dtype()) +
                        ", " + dtype_name(in1.dtype()) + " -> " + dtype_name(out0.dtype()) + ", " +
                        dtype_name(out1.dtype()) +
                        (grads ? ": dy and x must share a dtype; dw and db are fp32"
                               : ": x, w, b and y must share one dtype"));
  }
}

}  // namespace colrow::kernels
