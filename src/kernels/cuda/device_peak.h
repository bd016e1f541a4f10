// The peak dense fp32 GEMM rate of a GPU, the denominator of MFU.
#pragma once

namespace colrow::cuda {

// FLOP/s for fp32 GEMMs on `device`, with TF32 when allow_tf32() is on: the
// vendor's dense figure for GPUs colrow knows (H100/H200 SXM: 67 and 494.7
// TFLOP/s, as the PyTorch peer uses; A100: 19.5 and 156), otherwise
// SMs x 128 FP32 lanes x 2 x clock (and 8x that for TF32).
double peak_fp32_flops(int device);

}  // namespace colrow::cuda
