// cuBLAS (cublasSgemm; bf16 through cuBLASLt) for row-major operands, shapes
// checked up front as in kernels/cpu/gemm.cpp. cuBLAS is column-major, and a
// row-major [r, c] matrix with row stride ld is the column-major [c, r] matrix
// with leading dim ld, i.e. its transpose; so C = op(A) op(B) is computed as
// C^T = op(B)^T op(A)^T: B first, A second, m and n swapped, the transpose
// flags kept as they are.
#include "kernels/cuda/gemm.h"

#include <climits>
#include <string>

#include "colrow/core/error.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/gemm.h"
#include "kernels/cuda/cublas_handle.h"
#include "kernels/cuda/lt_matmul.h"
#include "kernels/cuda/operands.h"
#include "kernels/mixed_precision.h"

namespace colrow::kernels::cuda {
namespace {

// cuBLAS takes int sizes and leading dims.
int as_int(int64_t v, const char* what) {
  if (v > INT_MAX) {
    throw InternalError(std::string("[gemm] ") + what + " (" + std::to_string(v) +
                        ") exceeds cuBLAS's int range");
  }
  return static_cast<int>(v);
}

// c[i, j] = beta c[i, j] over a [rows, cols] view with row stride ld; beta = 0
// writes zeros, so NaN or garbage in c does not survive (BLAS's contract).
__global__ void scale_rows(float* c, int64_t rows, int64_t cols, int64_t ld, float beta) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  float& v = c[(i / cols) * ld + i % cols];
  v = beta == 0.0f ? 0.0f : beta * v;
}

cublasOperation_t op(Trans t) {
  return t == Trans::kNo ? CUBLAS_OP_N : CUBLAS_OP_T;
}

}  // namespace

void gemm(Trans trans_a, Trans trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
          Tensor& c) {
  const auto [m, n, k] = check_gemm(trans_a, trans_b, a, b, c);
  if (m == 0 || n == 0) return;
  const int device = cuda_device_of("gemm", {&a, &b, &c});
  if (a.dtype() == DType::kBF16) {
    if (k == 0) {  // c = beta c: in fp32 (rounded back into a bf16 c)
      const Tensor a32 = a.to(DType::kF32), b32 = b.to(DType::kF32);
      if (c.dtype() == DType::kF32) {
        gemm(trans_a, trans_b, alpha, a32, b32, beta, c);
        return;
      }
      Tensor c32 = c.to(DType::kF32);
      gemm(trans_a, trans_b, alpha, a32, b32, beta, c32);
      store_rounded(c32, c);
      return;
    }
    // bf16 operands on the tensor cores, fp32 accumulation, c rounded once
    // (bf16) or written in fp32. Through cuBLASLt, whose plan keeps split-K
    // away from a bf16 c (lt_matmul.cpp: measured to round it more than
    // once); cublasGemmEx where cuBLASLt refuses the problem.
    if (lt_matmul(device, op(trans_b), op(trans_a), lt_operand(b, b.size(1), b.size(0)),
                  lt_operand(a, a.size(1), a.size(0)), alpha, beta, lt_operand(c, n, m),
                  CUBLASLT_EPILOGUE_DEFAULT, nullptr) == CUBLAS_STATUS_SUCCESS) {
      return;
    }
    const cudaDataType_t c_type = c.dtype() == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
    COLROW_CUBLAS_CHECK(cublasGemmEx(
        colrow::cuda::cublas_handle(device), op(trans_b), op(trans_a), as_int(n, "n"),
        as_int(m, "m"), as_int(k, "k"), &alpha, b.raw_data(), CUDA_R_16BF,
        as_int(b.row_stride(), "b's row stride"), a.raw_data(), CUDA_R_16BF,
        as_int(a.row_stride(), "a's row stride"), &beta, c.raw_data(), c_type,
        as_int(c.row_stride(), "c's row stride"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  if (k == 0) {  // c = beta c: an empty sum (cuBLAS would want lda >= 1)
    constexpr int kThreads = 256;
    cudaStream_t stream = colrow::cuda::compute_stream(device);
    scale_rows<<<colrow::cuda::blocks_for(m * n, kThreads), kThreads, 0, stream>>>(
        c.data(), m, n, c.row_stride(), beta);
    COLROW_CUDA_CHECK_LAUNCH();
    return;
  }
  // cublas_handle() binds the handle to the compute stream; alpha and beta are
  // read from the host (the handle's default pointer mode) at the call.
  cublasHandle_t handle = colrow::cuda::cublas_handle(device);
  COLROW_CUBLAS_CHECK(cublasSgemm(handle, op(trans_b), op(trans_a), as_int(n, "n"), as_int(m, "m"),
                                  as_int(k, "k"), &alpha, b.data(),
                                  as_int(b.row_stride(), "b's row stride"), a.data(),
                                  as_int(a.row_stride(), "a's row stride"), &beta, c.data(),
                                  as_int(c.row_stride(), "c's row stride")));
}

}  // namespace colrow::kernels::cuda
