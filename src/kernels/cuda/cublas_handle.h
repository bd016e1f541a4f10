// The cuBLAS and cuBLASLt handles of each GPU, the first bound to its compute stream
// (core/cuda/cuda_context.h), and COLROW_CUBLAS_CHECK. fp32 GEMMs run in
// full fp32 unless TF32 is allowed (--tf32), as PyTorch's
// allow_tf32 = False default.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

namespace colrow::cuda {

// Makes `device` current and returns its handle (created on first use).
cublasHandle_t cublas_handle(int device);
// Makes `device` current and returns its cuBLASLt handle (created on first
// use; cuBLASLt takes the stream per call).
cublasLtHandle_t cublaslt_handle(int device);
// Whether fp32 GEMMs may use TF32 tensor cores, for every handle (off by default).
void set_allow_tf32(bool allowed);
bool allow_tf32();

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* statement, const char* file,
                                     int line);

}  // namespace colrow::cuda

#define COLROW_CUBLAS_CHECK(statement)                                                           \
  do {                                                                                           \
    const cublasStatus_t colrow_cublas_status_ = (statement);                                    \
    if (colrow_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                        \
      ::colrow::cuda::throw_cublas_error(colrow_cublas_status_, #statement, __FILE__, __LINE__); \
    }                                                                                            \
  } while (0)
