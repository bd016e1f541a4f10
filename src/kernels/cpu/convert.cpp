// dtype conversion: the op over Tensor::convert_from, which holds the
// rounding (core/bfloat16.h) for every device.
#include "kernels/cpu/convert.h"

#include "kernels/checks/convert.h"
#include "kernels/mixed_precision.h"

namespace colrow::kernels::cpu {

void convert(const Tensor& src, Tensor& dst) {
  check_convert(src, dst);
  dst.convert_from(src);
}

Tensor as_f32(const Tensor& t) {
  return widened(t, [](const Tensor& src, Tensor& dst) { convert(src, dst); });
}

void store_converted(const Tensor& src, Tensor& dst) {
  store_rounded(src, dst, [](const Tensor& from, Tensor& to) { convert(from, to); });
}

}  // namespace colrow::kernels::cpu
