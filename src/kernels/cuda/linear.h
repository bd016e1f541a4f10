// The CUDA twin of kernels/cpu/linear.h: a linear layer's GEMM with its bias
// work in cuBLASLt's epilogue. Forward adds b in the GEMM's epilogue
// (CUBLASLT_EPILOGUE_BIAS); the weight gradient's GEMM also reduces dy over
// the tokens into db (CUBLASLT_EPILOGUE_BGRADB), so neither pass reads the
// [tokens, out] activations again. Where cuBLASLt offers no algorithm for a
// shape, the GEMM and the bias kernels run one after the other.
// Every tensor lives on one GPU; work is queued on its compute stream.
#pragma once

#include "colrow/core/tensor.h"

namespace colrow::kernels::cuda {

// Whether the calls below try cuBLASLt's epilogues (default) or run the GEMM
// and the element-wise kernels (Backend::set_fused_epilogues).
void set_fused_epilogues(bool fused);
bool fused_epilogues();
// The epilogues, and how many calls ran one in cuBLASLt since the program
// began. A refusal runs the separate kernels instead (the same results for
// the bias ones; the GELU pair's within a rounding, kernels/cuda/linear.cpp),
// so this is how a test (or a profile) tells the two apart. A GELU call whose
// epilogue was refused counts nothing under kGelu, whatever its fallback's
// bias GEMM counts under kBias.
enum class Epilogue { kBias, kBiasGrad, kGelu, kGeluGrad };
constexpr Epilogue kEpilogues[] = {Epilogue::kBias, Epilogue::kBiasGrad, Epilogue::kGelu,
                                   Epilogue::kGeluGrad};
int64_t fused_epilogue_runs(Epilogue epilogue);

// y = x w^T + b
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);

// dw += dy^T x and db += the column sums of dy.
void linear_weight_grads(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db);

// The GELU MLP's pair (kernels/cpu/linear.h), in bf16 through cuBLASLt's
// GELU_AUX(_BIAS) and DGELU epilogues; fp32, and shapes cuBLASLt refuses,
// through the GEMM and the GELU kernels.
void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& pre_activation,
                         Tensor& y);
void gelu_input_grad(const Tensor& dy, const Tensor& w, const Tensor& pre_activation, Tensor& dx);

}  // namespace colrow::kernels::cuda
