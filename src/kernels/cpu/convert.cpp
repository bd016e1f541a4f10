// dtype conversion, parallel over elements (memory-bound: one pass).
#include "kernels/cpu/convert.h"

#include "colrow/core/bfloat16.h"
#include "kernels/checks/convert.h"
#include "kernels/cpu/parallel.h"
#include "kernels/mixed_precision.h"

namespace colrow::kernels::cpu {

void convert(const Tensor& src, Tensor& dst) {
  check_convert(src, dst);
  const int64_t n = src.numel();
  if (src.dtype() == dst.dtype()) {
    dst.copy_from(src);
  } else if (src.dtype() == DType::kF32) {
    const float* x = src.data();
    uint16_t* y = dst.bf16_data();
#pragma omp parallel for simd schedule(static) if (parallel : n > kParallelElements)
    for (int64_t i = 0; i < n; ++i) y[i] = float_to_bf16(x[i]);
  } else {
    const uint16_t* x = src.bf16_data();
    float* y = dst.data();
#pragma omp parallel for simd schedule(static) if (parallel : n > kParallelElements)
    for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_float(x[i]);
  }
}

Tensor as_f32(const Tensor& t) {
  return widened(t, [](const Tensor& src, Tensor& dst) { convert(src, dst); });
}

void store_converted(const Tensor& src, Tensor& dst) {
  store_rounded(src, dst, [](const Tensor& from, Tensor& to) { convert(from, to); });
}

}  // namespace colrow::kernels::cpu
