// dtype conversion on the GPU: the op over Tensor::convert_from, whose kernel
// (core/cuda/device_runtime.cu) rounds like core/bfloat16.h, NaN payloads
// included, so the CPU and the GPU give the same bits for every input.
#include "kernels/cuda/convert.h"

#include "kernels/checks/convert.h"
#include "kernels/cuda/operands.h"
#include "kernels/mixed_precision.h"

namespace colrow::kernels::cuda {

void convert(const Tensor& src, Tensor& dst) {
  check_convert(src, dst);
  cuda_device_of("convert", {&src, &dst});  // both on one GPU
  dst.convert_from(src);
}

Tensor as_f32(const Tensor& t) {
  return widened(t, [](const Tensor& src, Tensor& dst) { convert(src, dst); });
}

void store_converted(const Tensor& src, Tensor& dst) {
  store_rounded(src, dst, [](const Tensor& from, Tensor& to) { convert(from, to); });
}

}  // namespace colrow::kernels::cuda
