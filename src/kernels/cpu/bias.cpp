// Bias add, parallel over tokens, and bias-gradient column sums, parallel over
// (token block, feature block) in a fixed order (parallel.h). Activations and
// the bias are fp32 or bf16, read natively (one rounding per output); the
// gradient is fp32.
#include "kernels/cpu/bias.h"

#include <algorithm>

#include "colrow/core/bfloat16.h"
#include "kernels/checks/bias.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elements.h"

namespace colrow::kernels::cpu {

void add_bias(Tensor& y, const Tensor& b) {
  check_bias(y, b, "add_bias");
  const int64_t tokens = y.size(0), features = y.size(1), ld = y.row_stride();
  with_element_type("add_bias", {&y, &b}, [&](auto e) {
    using E = decltype(e);
    E* out = elements<E>(y);
    const E* bias = elements<E>(b);
#pragma omp parallel for schedule(static) if (tokens * features > kParallelElements)
    for (int64_t t = 0; t < tokens; ++t) {
      E* row = out + t * ld;
#pragma omp simd
      for (int64_t j = 0; j < features; ++j) row[j] = narrow<E>(widen(row[j]) + widen(bias[j]));
    }
  });
}

void accumulate_bias_grad(const Tensor& dy, Tensor& db) {
  check_bias(dy, db, "accumulate_bias_grad");
  const int64_t ld = dy.row_stride();
  float* out = db.data();
  with_elements(dy, [&](const auto* grad) {
    // In fp32, like one fp32 sum over the tokens; blocks of kRowBlock tokens
    // (parallel.h) only shorten the chains, so the Higham bound still holds.
    // 256 features per task stream the rows best (measured).
    constexpr int64_t kWidth = 256;
    column_sums<kWidth, float, 1>(
        dy.size(0), dy.size(1),
        [&](int64_t r0, int64_t r1, int64_t j0, int64_t j1, float* sums, int64_t) {
          float sum[kWidth] = {};
          for (int64_t t = r0; t < r1; ++t) {
            const auto* row = grad + t * ld + j0;
#pragma omp simd
            for (int64_t j = 0; j < j1 - j0; ++j) sum[j] += widen(row[j]);
          }
          std::copy(sum, sum + (j1 - j0), sums);
        },
        [&](int64_t j0, int64_t j1, const float* total, int64_t) {
          for (int64_t j = j0; j < j1; ++j) out[j] += total[j - j0];
        });
  });
}

}  // namespace colrow::kernels::cpu
