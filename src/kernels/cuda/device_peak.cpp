// Peak fp32 / TF32 GEMM rates by GPU (see device_peak.h).
#include "kernels/cuda/device_peak.h"

#include <cuda_runtime.h>

#include <string>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/cublas_handle.h"

namespace colrow::cuda {

double peak_fp32_flops(int device) {
  cudaDeviceProp prop{};
  COLROW_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const std::string name = prop.name;
  const bool tf32 = allow_tf32();
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) {
    return tf32 ? 494.7e12 : 67e12;
  }
  if (name.find("A100") != std::string::npos) return tf32 ? 156e12 : 19.5e12;
  int clock_khz = 0;
  COLROW_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
  const double fp32 = prop.multiProcessorCount * 128.0 * 2.0 * clock_khz * 1e3;
  return tf32 ? 8.0 * fp32 : fp32;
}

}  // namespace colrow::cuda
