// cublasSgemm for row-major operands, shapes checked up front as in
// kernels/cpu/gemm.cpp. cuBLAS is column-major, and a row-major [r, c] matrix
// with row stride ld is the column-major [c, r] matrix with leading dim ld,
// i.e. its transpose; so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T:
// B first, A second, m and n swapped, the transpose flags kept as they are.
#include "kernels/cuda/gemm.h"

#include <climits>
#include <string>

#include "colrow/core/error.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "kernels/cuda/cublas_handle.h"

namespace colrow::kernels::cuda {
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

// The GPU every non-empty operand lives on; InternalError for a host tensor or
// a mix of GPUs (a kernel would read host memory as device memory).
int device_of(const char* what, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->numel() == 0) continue;
    if (!t->device().is_cuda()) {
      throw InternalError(std::string("[gemm] ") + what + ": operands must be CUDA tensors, got " +
                          "one on " + t->device().str());
    }
    require_device(what, t->device(), tensors);
    return t->device().index;
  }
  return 0;
}

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
  const int device = device_of("gemm", {&a, &b, &c});
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
