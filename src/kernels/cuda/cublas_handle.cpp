// One cuBLAS and one cuBLASLt handle per GPU; the TF32 switch.
#include "kernels/cuda/cublas_handle.h"

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "colrow/core/error.h"
#include "core/cuda/cuda_context.h"
#include "kernels/cuda/kept_buffers.h"

namespace colrow::cuda {
namespace {

std::atomic<bool> g_allow_tf32{false};
// cuBLAS's own recommendation for Hopper (cublasSetWorkspace).
constexpr size_t kWorkspaceBytes = 32u << 20;

// Split-K partial sums stay in the fp32 accumulator: by default cuBLAS may
// reduce them in a bf16 output's type, rounding c more than once (PyTorch
// sets this flag only with allow_bf16_reduced_precision_reduction=False; its
// default allows it). No effect on fp32 outputs.
cublasMath_t math_mode() {
  const int mode = (g_allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  return static_cast<cublasMath_t>(mode);
}

}  // namespace

cublasHandle_t cublas_handle(int device) {
  static std::mutex mutex;
  static std::map<int, cublasHandle_t> handles;
  cudaStream_t stream = compute_stream(device);  // also makes `device` current
  std::lock_guard<std::mutex> lock(mutex);
  cublasHandle_t& handle = handles[device];
  if (handle == nullptr) {
    // Kept only once set up whole: a throw below leaves no half-made handle.
    cublasHandle_t made = nullptr;
    COLROW_CUBLAS_CHECK(cublasCreate(&made));
    try {
      COLROW_CUBLAS_CHECK(cublasSetStream(made, stream));
      // A workspace of its own for the program (cuBLAS's advice for CUDA
      // graphs): otherwise captured GEMMs may add allocation nodes to a graph.
      // Set after the stream, which resets it; used in compute-stream order.
      COLROW_CUBLAS_CHECK(cublasSetWorkspace(
          made,
          kernels::cuda::kept_scratch(device, "cublas.workspace", {kWorkspaceBytes / 4}).data(),
          kWorkspaceBytes));
    } catch (...) {
      cublasDestroy(made);
      throw;
    }
    handle = made;
  }
  COLROW_CUBLAS_CHECK(cublasSetMathMode(handle, math_mode()));
  return handle;
}

cublasLtHandle_t cublaslt_handle(int device) {
  static std::mutex mutex;
  static std::map<int, cublasLtHandle_t> handles;
  compute_stream(device);  // makes `device` current
  std::lock_guard<std::mutex> lock(mutex);
  cublasLtHandle_t& handle = handles[device];
  if (handle == nullptr) COLROW_CUBLAS_CHECK(cublasLtCreate(&handle));
  return handle;
}

void set_allow_tf32(bool allowed) {
  g_allow_tf32 = allowed;
}

bool allow_tf32() {
  return g_allow_tf32;
}

void throw_cublas_error(cublasStatus_t status, const char* statement, const char* file, int line) {
  throw BackendError("[cublas] " + std::string(statement) +
                     " failed: " + cublasGetStatusName(status) + " (" +
                     cublasGetStatusString(status) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace colrow::cuda
