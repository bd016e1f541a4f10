// The GEMM, then the bias kernel (linear.h).
#include "kernels/cpu/linear.h"

#include "kernels/checks/gemm.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/bias.h"
#include "kernels/cpu/gemm.h"
#include "kernels/mixed_precision.h"

namespace colrow::kernels::cpu {

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  check_linear_dtypes("linear_forward", x, w, y, b, false);
  if (y.dtype() == DType::kF32) {
    gemm(Trans::kNo, Trans::kYes, 1.0f, x, w, 0.0f, y);
    add_bias(y, b);
    return;
  }
  Tensor y32 = Tensor::empty(y.shape());  // fp32 sums, the bias, one rounding
  gemm(Trans::kNo, Trans::kYes, 1.0f, x, w, 0.0f, y32);
  add_bias(y32, b.to(DType::kF32));
  store_rounded(y32, y);
}

void linear_weight_grads(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db) {
  check_linear_dtypes("linear_weight_grads", dy, x, dw, db, true);
  gemm(Trans::kYes, Trans::kNo, 1.0f, dy, x, 1.0f, dw);
  accumulate_bias_grad(dy, db);  // reads bf16 dy natively
}

void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& pre_activation,
                         Tensor& y) {
  if (b != nullptr) {
    linear_forward(x, w, *b, pre_activation);
  } else {
    gemm(Trans::kNo, Trans::kYes, 1.0f, x, w, 0.0f, pre_activation);
  }
  gelu_forward(GeluForm::kTanh, pre_activation, y);
}

void gelu_input_grad(const Tensor& dy, const Tensor& w, const Tensor& pre_activation, Tensor& dx) {
  gemm(Trans::kNo, Trans::kNo, 1.0f, dy, w, 0.0f, dx);
  gelu_backward(GeluForm::kTanh, pre_activation, dx, dx);  // element for element, in place
}

}  // namespace colrow::kernels::cpu
