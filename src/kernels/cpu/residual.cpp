// Residual adds, parallel over elements (memory-bound: one pass each).
#include "kernels/cpu/residual.h"

#include "kernels/checks/elementwise.h"
#include "kernels/cpu/parallel.h"

namespace colrow::kernels::cpu {
namespace {}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  check_elementwise("residual", "add", a, {&b, &out});
  const int64_t n = a.numel();
  const float* x = a.data();
  const float* y = b.data();
  float* z = out.data();
#pragma omp parallel for simd schedule(static) if (parallel : n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
}

void add_into(Tensor& out, const Tensor& a) {
  check_elementwise("residual", "add_into", out, {&a});
  const int64_t n = a.numel();
  const float* x = a.data();
  float* z = out.data();
#pragma omp parallel for simd schedule(static) if (parallel : n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) z[i] += x[i];
}

}  // namespace colrow::kernels::cpu
