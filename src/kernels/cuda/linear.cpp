// cuBLASLt with epilogues for a linear layer (linear.h). Row-major [r, c]
// with row stride ld is, to column-major cuBLAS, [c, r] with leading dim ld
// (kernels/cuda/gemm.cu), so:
//   y = x w^T + b   is  y' [out, tokens] = op_T(w' [in, out]) x' [in, tokens],
//                       b added to every column (a bias of y's m = out rows);
//   dw += dy^T x    is  dw' [in, out] += x' [in, tokens] op_T(dy' [out, tokens]),
//                       db = the sums of dy' over the GEMM's k (tokens): BGRADB,
//                       which writes a fresh vector that is then added to db.
// bf16 operands (mixed precision): A and B bf16, fp32 accumulation; forward's
// D and bias bf16, the gradients' D and bias gradient fp32 (cuBLASLt's bias
// vector takes D's type). Where cuBLASLt has no algorithm, the CPU's pattern
// runs instead: fp32 product, fp32 bias, one rounding.
// The GELU MLP's pair (bf16 only): forward's GELU_AUX(_BIAS) writes
// gelu(x w^T + b) to D and the pre-activation to the aux matrix, laid out as
// D; the input gradient's DGELU multiplies dy w by gelu'(aux) before its one
// rounding:  dx' [in, tokens] = w' [in, out] dy' [out, tokens], aux = pre'.
// cuBLASLt's GELU is the tanh form. fp32 keeps the separate kernels, the
// reference the GPU is checked against at 1e-5: cuBLASLt does not document
// its GELU's accuracy, and bf16's rounding (2^-8, its unit roundoff) covers
// an error like tanh.approx's (2^-11).
#include "kernels/cuda/linear.h"

#include <cublasLt.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>

#include "colrow/core/error.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/bias.h"
#include "kernels/checks/gemm.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/bias.h"
#include "kernels/cuda/cublas_handle.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kept_buffers.h"
#include "kernels/cuda/lt_matmul.h"
#include "kernels/cuda/operands.h"
#include "kernels/cuda/residual.h"
#include "kernels/mixed_precision.h"

namespace colrow::kernels::cuda {
namespace {

std::atomic<bool> g_fused_epilogues{true};
std::atomic<int64_t> g_fused_runs[std::size(kEpilogues)] = {};  // by Epilogue

void count_fused(Epilogue epilogue) {
  ++g_fused_runs[static_cast<int>(epilogue)];
}

// Says once per call site that it runs unfused, so that a profile's extra
// bias or activation passes have an explanation.
void note_unfused(std::atomic<bool>& noted, const char* what, cublasStatus_t why) {
  if (!noted.exchange(true)) {
    std::fprintf(stderr,
                 "[cublaslt] note: no algorithm for %s with its epilogue (%s); the GEMM and the "
                 "element-wise kernel run separately\n",
                 what, cublasGetStatusName(why));
  }
}

// bf16 (the operands share its dtype, checked), and cuBLASLt's rules for a
// GELU aux matrix: a leading dimension divisible by 8, 16-byte aligned (else:
// the kernels).
bool gelu_epilogue_fits(const Tensor& pre_activation) {
  return pre_activation.dtype() == DType::kBF16 && pre_activation.row_stride() % 8 == 0 &&
         reinterpret_cast<uintptr_t>(pre_activation.raw_data()) % 16 == 0;
}

// Shaped as out and laid out as a GEMM's matrix: it is written or read as
// cuBLASLt's aux matrix, or as the separate path's GEMM output.
void require_like(const char* what, const Tensor& pre_activation, const Tensor& out) {
  require_gemm_matrix(pre_activation, "pre_activation");
  if (pre_activation.shape() != out.shape()) {
    throw InternalError(std::string("[linear] ") + what + ": pre_activation " +
                        shape_to_string(pre_activation.shape()) + " must be shaped like " +
                        shape_to_string(out.shape()));
  }
}

}  // namespace

void set_fused_epilogues(bool fused) {
  g_fused_epilogues = fused;
}

bool fused_epilogues() {
  return g_fused_epilogues;
}

int64_t fused_epilogue_runs(Epilogue epilogue) {
  return g_fused_runs[static_cast<int>(epilogue)];
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  const auto [tokens, out, in] = check_gemm(Trans::kNo, Trans::kYes, x, w, y);
  check_bias(y, b, "linear_forward");
  check_linear_dtypes("linear_forward", x, w, y, b, false);
  const int device = cuda_device_of("linear_forward", {&x, &w, &b, &y});
  if (fused_epilogues() && tokens > 0 && out > 0 && in > 0) {
    const cublasStatus_t fused = lt_matmul(
        device, CUBLAS_OP_T, CUBLAS_OP_N, lt_operand(w, in, out), lt_operand(x, in, tokens), 1.0f,
        0.0f, lt_operand(y, out, tokens), CUBLASLT_EPILOGUE_BIAS, b.raw_data());
    if (fused == CUBLAS_STATUS_SUCCESS) {
      count_fused(Epilogue::kBias);
      return;
    }
    static std::atomic<bool> noted{false};
    note_unfused(noted, "linear_forward", fused);
  }
  if (y.dtype() == DType::kF32) {
    gemm(Trans::kNo, Trans::kYes, 1.0f, x, w, 0.0f, y);
    add_bias(y, b);
    return;
  }
  // fp32 sums, the bias, one rounding; in kept buffers, so that a warm step
  // allocates nothing on this path either (--epilogues separate, a refusal).
  Tensor y32 = kept_scratch(device, "linear.forward_sums", y.shape());
  Tensor b32 = kept_scratch(device, "linear.forward_bias", b.shape());
  gemm(Trans::kNo, Trans::kYes, 1.0f, x, w, 0.0f, y32);
  b32.convert_from(b);
  add_bias(y32, b32);
  store_rounded(y32, y);
}

void linear_weight_grads(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db) {
  const auto [out, in, tokens] = check_gemm(Trans::kYes, Trans::kNo, dy, x, dw);
  check_bias(dy, db, "linear_weight_grads");
  check_linear_dtypes("linear_weight_grads", dy, x, dw, db, true);
  const int device = cuda_device_of("linear_weight_grads", {&dy, &x, &dw, &db});
  if (fused_epilogues() && tokens > 0 && out > 0 && in > 0) {
    Tensor sums = kept_scratch(device, "linear.bias_grad_sums", {out});  // BGRADB overwrites
    const cublasStatus_t fused = lt_matmul(
        device, CUBLAS_OP_N, CUBLAS_OP_T, lt_operand(x, in, tokens), lt_operand(dy, out, tokens),
        1.0f, 1.0f, lt_operand(dw, in, out), CUBLASLT_EPILOGUE_BGRADB, sums.data());
    if (fused == CUBLAS_STATUS_SUCCESS) {
      count_fused(Epilogue::kBiasGrad);
      add_into(db, sums);
      return;
    }
    static std::atomic<bool> noted{false};
    note_unfused(noted, "linear_weight_grads", fused);
  }
  gemm(Trans::kYes, Trans::kNo, 1.0f, dy, x, 1.0f, dw);
  accumulate_bias_grad(dy, db);  // reads bf16 dy natively
}

void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& pre_activation,
                         Tensor& y) {
  const char* what = "linear_gelu_forward";
  const auto [tokens, out, in] = check_gemm(Trans::kNo, Trans::kYes, x, w, y);
  require_like(what, pre_activation, y);
  check_linear_dtypes(what, x, w, y, pre_activation, false);
  if (b != nullptr) {
    check_bias(y, *b, what);
    check_linear_dtypes(what, x, w, y, *b, false);
  }
  const int device = cuda_device_of(what, {&x, &w, b, &pre_activation, &y});
  if (fused_epilogues() && tokens > 0 && out > 0 && in > 0 && gelu_epilogue_fits(pre_activation)) {
    const cublasStatus_t fused =
        lt_matmul(device, CUBLAS_OP_T, CUBLAS_OP_N, lt_operand(w, in, out),
                  lt_operand(x, in, tokens), 1.0f, 0.0f, lt_operand(y, out, tokens),
                  b != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX,
                  b != nullptr ? b->raw_data() : nullptr,
                  LtAux{pre_activation.raw_data(), pre_activation.row_stride()});
    if (fused == CUBLAS_STATUS_SUCCESS) {
      count_fused(Epilogue::kGelu);
      return;
    }
    static std::atomic<bool> noted{false};
    note_unfused(noted, what, fused);
  }
  if (b != nullptr) {
    linear_forward(x, w, *b, pre_activation);
  } else {
    gemm(Trans::kNo, Trans::kYes, 1.0f, x, w, 0.0f, pre_activation);
  }
  gelu_forward(GeluForm::kTanh, pre_activation, y);
}

void gelu_input_grad(const Tensor& dy, const Tensor& w, const Tensor& pre_activation, Tensor& dx) {
  const char* what = "gelu_input_grad";
  const auto [tokens, in, out] = check_gemm(Trans::kNo, Trans::kNo, dy, w, dx);
  require_like(what, pre_activation, dx);
  check_linear_dtypes(what, dy, w, dx, pre_activation, false);
  const int device = cuda_device_of(what, {&dy, &w, &pre_activation, &dx});
  if (fused_epilogues() && tokens > 0 && out > 0 && in > 0 && gelu_epilogue_fits(pre_activation)) {
    const cublasStatus_t fused = lt_matmul(
        device, CUBLAS_OP_N, CUBLAS_OP_N, lt_operand(w, in, out), lt_operand(dy, out, tokens), 1.0f,
        0.0f, lt_operand(dx, in, tokens), CUBLASLT_EPILOGUE_DGELU, nullptr,
        LtAux{pre_activation.raw_data(), pre_activation.row_stride()});
    if (fused == CUBLAS_STATUS_SUCCESS) {
      count_fused(Epilogue::kGeluGrad);
      return;
    }
    static std::atomic<bool> noted{false};
    note_unfused(noted, what, fused);
  }
  gemm(Trans::kNo, Trans::kNo, 1.0f, dy, w, 0.0f, dx);
  gelu_backward(GeluForm::kTanh, pre_activation, dx, dx);  // element for element, in place
}

}  // namespace colrow::kernels::cuda
