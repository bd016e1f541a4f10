// One check macro per CUDA library: the statement, the library's message,
// file, line and the device, as COLROW_MPI_CHECK does for MPI.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace colrow {

[[noreturn]] void throw_cuda_error(cudaError_t code, const char* statement, const char* file,
                                   int line);

}  // namespace colrow

#define COLROW_CUDA_CHECK(statement)                                                \
  do {                                                                              \
    const cudaError_t colrow_cuda_code_ = (statement);                              \
    if (colrow_cuda_code_ != cudaSuccess) {                                         \
      ::colrow::throw_cuda_error(colrow_cuda_code_, #statement, __FILE__, __LINE__); \
    }                                                                               \
  } while (0)

// After a kernel launch: a bad launch configuration shows here, not later.
#define COLROW_CUDA_CHECK_LAUNCH() COLROW_CUDA_CHECK(cudaGetLastError())
