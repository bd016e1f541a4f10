// The peak dense GEMM rate of a GPU, the denominator of MFU.
#pragma once

#include "colrow/core/dtype.h"

namespace colrow::cuda {

// FLOP/s for GEMMs with `dtype` operands on `device`, fp32 with TF32 when
// allow_tf32() is on: the vendor's dense figures for GPUs colrow knows
// (H100/H200 SXM: fp32 67, TF32 494.7, bf16 989.4 TFLOP/s, as the PyTorch
// peer uses; A100: 19.5, 156, 312), otherwise SMs x 128 FP32 lanes x 2 x
// clock, and 8x (TF32) or 16x (bf16) that.
double peak_gemm_flops(int device, DType dtype);

}  // namespace colrow::cuda
