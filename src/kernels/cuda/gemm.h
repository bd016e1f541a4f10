// CUDA twin of kernels/cpu/gemm.h, where the layouts and the three products of
// a linear layer are documented: c = alpha op(a) op(b) + beta c through
// cublasSgemm on the device's compute stream, row-major operands read in place
// through their row stride. fp32, or TF32 when the handle allows it (--tf32);
// bf16 a and b through cuBLASLt (fp32 accumulation, no split-K into a bf16 c:
// lt_matmul.h), cublasGemmEx where cuBLASLt refuses, into an fp32 or bf16 c.
#pragma once

#include "colrow/core/tensor.h"
#include "kernels/trans.h"

namespace colrow::kernels::cuda {

// c = alpha * op(a) op(b) + beta * c.
// op(a): [m, k], op(b): [k, n], c: [m, n]; 2-d views with a contiguous last dim.
void gemm(Trans trans_a, Trans trans_b, float alpha, const Tensor& a, const Tensor& b, float beta,
          Tensor& c);

}  // namespace colrow::kernels::cuda
