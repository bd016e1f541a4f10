// The GEMM, then the bias kernel (linear.h).
#include "kernels/cpu/linear.h"

#include "kernels/cpu/bias.h"
#include "kernels/cpu/gemm.h"

namespace colrow::kernels::cpu {

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  gemm(Trans::kNo, Trans::kYes, 1.0f, x, w, 0.0f, y);
  add_bias(y, b);
}

void linear_weight_grads(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db) {
  gemm(Trans::kYes, Trans::kNo, 1.0f, dy, x, 1.0f, dw);
  accumulate_bias_grad(dy, db);
}

}  // namespace colrow::kernels::cpu
