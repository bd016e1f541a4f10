// TP-invariant random fills (see init.h): each element's full-tensor index,
// then its Philox draw.
#include "kernels/cpu/init.h"

#include "colrow/core/error.h"
#include "colrow/core/philox.h"
#include "kernels/cpu/parallel.h"

namespace colrow::kernels::cpu {

void fill_random(Tensor& local, const RandomFill& f) {
  const Shape& full = f.full_shape;
  const int nd = static_cast<int>(full.size());
  if (!local.is_contiguous() || local.ndim() != nd || f.dim < 0 || f.dim >= nd) {
    throw InternalError("[init] shard " + shape_to_string(local.shape()) +
                        " must be contiguous with the rank of " + shape_to_string(full));
  }
  // full flat index = sum over dims of (local index + offset on the shard dim) * full stride
  std::vector<int64_t> full_strides(nd, 1);
  for (int d = nd - 2; d >= 0; --d) full_strides[d] = full_strides[d + 1] * full[d + 1];
  const Shape local_shape = local.shape();
  const int64_t offset = f.offset_along_dim * full_strides[f.dim];
  const int64_t n = local.numel();
  float* out = local.data();
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, full_index = offset;
    for (int d = nd - 1; d >= 0; --d) {
      full_index += (rem % local_shape[d]) * full_strides[d];
      rem /= local_shape[d];
    }
    const uint64_t idx = static_cast<uint64_t>(full_index);
    out[i] = f.normal ? f.scale * standard_normal(f.seed, f.stream, idx)
                      : f.scale * (2.0f * uniform01(f.seed, f.stream, idx) - 1.0f);
  }
}

}  // namespace colrow::kernels::cpu
