// Residual adds, parallel over elements (memory-bound: one pass each).
#include "kernels/cpu/residual.h"

#include "colrow/core/error.h"

namespace colrow::kernels::cpu {
namespace {

constexpr int64_t kParallelElements = 1 << 15;

void require_same(const Tensor& a, const Tensor& b, const char* what) {
  if (!a.is_contiguous() || !b.is_contiguous() || a.shape() != b.shape()) {
    throw InternalError(std::string("[residual] ") + what +
                        ": operands must be contiguous and of one shape, got " +
                        shape_to_string(a.shape()) + " and " + shape_to_string(b.shape()));
  }
}

}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  require_same(a, b, "add");
  require_same(a, out, "add");
  const int64_t n = a.numel();
  const float* x = a.data();
  const float* y = b.data();
  float* z = out.data();
#pragma omp parallel for simd schedule(static) if (parallel : n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
}

void add_into(Tensor& out, const Tensor& a) {
  require_same(out, a, "add_into");
  const int64_t n = a.numel();
  const float* x = a.data();
  float* z = out.data();
#pragma omp parallel for simd schedule(static) if (parallel : n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) z[i] += x[i];
}

}  // namespace colrow::kernels::cpu
