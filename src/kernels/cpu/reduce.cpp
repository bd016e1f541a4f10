// Whole-tensor reductions and scalings (see reduce.h).
#include "kernels/cpu/reduce.h"

#include "colrow/core/error.h"
#include "kernels/cpu/parallel.h"

namespace colrow::kernels::cpu {
namespace {

void require_contiguous(const Tensor& t, const char* what) {
  if (!t.is_contiguous()) {
    throw InternalError(std::string("[reduce] ") + what + ": tensor " + shape_to_string(t.shape()) +
                        " must be contiguous");
  }
}

}  // namespace

double sum_of_squares(const std::vector<Tensor>& parts) {
  // Sequential in double: the sum depends on nothing but the values. Gradient
  // norms are a few passes per step over memory the optimizer reads anyway.
  double sum = 0.0;
  for (const Tensor& part : parts) {
    require_contiguous(part, "sum_of_squares");
    const float* x = part.data();
    for (int64_t i = 0, n = part.numel(); i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  }
  return sum;
}

void divide(Tensor& x, float divisor) {
  require_contiguous(x, "divide");
  float* p = x.data();
  const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (parallel : n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) p[i] /= divisor;
}

}  // namespace colrow::kernels::cpu
