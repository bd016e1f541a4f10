// Peak fp32, TF32 and bf16 GEMM rates by GPU (see device_peak.h).
#include "kernels/cuda/device_peak.h"

#include <cuda_runtime.h>

#include <string>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/cublas_handle.h"

namespace colrow::cuda {

double peak_gemm_flops(int device, DType dtype) {
  cudaDeviceProp prop{};
  COLROW_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const std::string name = prop.name;
  const bool bf16 = dtype == DType::kBF16, tf32 = !bf16 && allow_tf32();
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) {
    return bf16 ? 989.4e12 : tf32 ? 494.7e12 : 67e12;
  }
  if (name.find("A100") != std::string::npos) return bf16 ? 312e12 : tf32 ? 156e12 : 19.5e12;
  int clock_khz = 0;
  COLROW_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
  const double fp32 = prop.multiProcessorCount * 128.0 * 2.0 * clock_khz * 1e3;
  return bf16 ? 16.0 * fp32 : tf32 ? 8.0 * fp32 : fp32;
}

}  // namespace colrow::cuda
