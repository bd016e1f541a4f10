// Residual adds, parallel over elements (memory-bound: one pass each), on
// fp32 or bf16 operands (kernels/cpu/element_blocks.h: one rounding per sum).
#include "kernels/cpu/residual.h"

#include "kernels/checks/elementwise.h"
#include "kernels/cpu/element_blocks.h"

namespace colrow::kernels::cpu {

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  check_elementwise("residual", "add", a, {&b, &out});
  map_element_blocks<2, 1>("add", {&a, &b}, {&out}, [](auto in, auto sum, int64_t n) {
    const float *x = in[0], *y = in[1];
    float* z = sum[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
  });
}

void add_into(Tensor& out, const Tensor& a) {
  check_elementwise("residual", "add_into", out, {&a});
  map_element_blocks<2, 1>("add_into", {&out, &a}, {&out}, [](auto in, auto sum, int64_t n) {
    const float *z0 = in[0], *x = in[1];
    float* z = sum[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) z[i] = z0[i] + x[i];
  });
}

}  // namespace colrow::kernels::cpu
