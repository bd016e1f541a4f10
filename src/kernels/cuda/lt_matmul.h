// cuBLASLt matmuls with epilogues on a GPU's compute stream, one 32 MiB
// workspace per GPU (kept_buffers.h). Row-major tensors are column-major
// operands through their row stride (kernels/cuda/linear.cpp maps each layer
// GEMM). Each problem's descriptors and algorithm, or cuBLASLt's refusal,
// are kept for the program, keyed by everything they depend on (shapes,
// dtypes, epilogue, TF32, operand alignments), as PyTorch caches its plans:
// a kept plan's call only sets its pointers, instead of creating five
// descriptors and querying the heuristic (host time per call, not measured
// here).
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "colrow/core/tensor.h"

namespace colrow::kernels::cuda {

// One column-major operand: stored [rows, cols] with leading dim ld.
struct LtOperand {
  const void* data;
  cudaDataType_t type;
  int64_t rows, cols, ld;
};

// The row-major tensor t, [cols, rows] with its row stride, as the
// column-major [rows, cols] operand (fp32 or bf16).
LtOperand lt_operand(const Tensor& t, int64_t rows, int64_t cols);

// The epilogue's aux matrix (GELU's input), laid out as D; none by default.
struct LtAux {
  const void* data = nullptr;
  int64_t ld = 0;
};

// d = alpha op_a(a) op_b(b) + beta d with `epilogue` reading or writing `bias`
// (and `aux`), fp32 accumulation (TF32 where allowed for fp32 operands):
// CUBLAS_STATUS_SUCCESS once queued; the status (nothing queued) when
// cuBLASLt has no algorithm for it or refuses the problem, as PyTorch's
// gemm_and_bias falls back on any refusal; other errors throw.
cublasStatus_t lt_matmul(int device, cublasOperation_t op_a, cublasOperation_t op_b,
                         const LtOperand& a, const LtOperand& b, float alpha, float beta,
                         const LtOperand& d, cublasLtEpilogue_t epilogue, const void* bias,
                         LtAux aux = {});

}  // namespace colrow::kernels::cuda
