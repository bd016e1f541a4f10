// TP-invariant parameter initialization: each rank computes the full-tensor
// index of each of its elements and draws it from Philox (core/philox.h).
#include "colrow/nn/parameter.h"

#include <cmath>

#include "colrow/core/error.h"
#include "colrow/core/philox.h"

namespace colrow {

Shape ShardSpec::local_shape() const {
  Shape s = full_shape;
  if (count < 1 || dim < 0 || dim >= static_cast<int>(s.size()) || s[dim] % count != 0 ||
      index < 0 || index >= count) {
    throw InternalError("[parameter] cannot take part " + std::to_string(index) + " of " +
                        std::to_string(count) + " along dim " + std::to_string(dim) + " of " +
                        shape_to_string(full_shape));
  }
  s[dim] /= count;
  return s;
}

bool ShardSpec::first_replica(int tp_rank, int tp_size) const {
  if (count < 1 || tp_size % count != 0) {
    throw InternalError("[parameter] shard count (" + std::to_string(count) +
                        ") must divide tp (" + std::to_string(tp_size) + ").");
  }
  return tp_rank % (tp_size / count) == 0;
}

Init Init::linear_default(int64_t fan_in_full) {
  return uniform(static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in_full))));
}

Parameter::Parameter(std::string name_, ShardSpec shard_, const Init& init, uint64_t seed)
    : name(std::move(name_)), shard(std::move(shard_)) {
  value = Tensor::empty(shard.local_shape());
  grad = Tensor::zeros(shard.local_shape());
  fill_shard(value, shard, init, seed, name);
}

void fill_shard(Tensor& local, const ShardSpec& shard, const Init& init, uint64_t seed,
                const std::string& name) {
  if (local.shape() != shard.local_shape() || !local.is_contiguous()) {
    throw InternalError("[parameter] " + name + ": buffer " + shape_to_string(local.shape()) +
                        " does not hold shard " + shape_to_string(shard.local_shape()));
  }
  if (init.kind == Init::Kind::kZeros || init.kind == Init::Kind::kOnes) {
    local.fill(init.kind == Init::Kind::kOnes ? 1.0f : 0.0f);
    return;
  }
  const uint64_t stream = name_stream(name);
  // full flat index = sum over dims of (local index + offset on the shard dim) * full stride
  const Shape& full = shard.full_shape;
  const int nd = static_cast<int>(full.size());
  std::vector<int64_t> full_strides(nd, 1);
  for (int d = nd - 2; d >= 0; --d) full_strides[d] = full_strides[d + 1] * full[d + 1];
  const Shape local_shape = local.shape();
  const int64_t offset = shard.offset_along_dim() * full_strides[shard.dim];
  const int64_t n = local.numel();
  float* out = local.data();
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, full_index = offset;
    for (int d = nd - 1; d >= 0; --d) {
      full_index += (rem % local_shape[d]) * full_strides[d];
      rem /= local_shape[d];
    }
    const uint64_t idx = static_cast<uint64_t>(full_index);
    out[i] = init.kind == Init::Kind::kNormal
                 ? init.scale * standard_normal(seed, stream, idx)
                 : init.scale * (2.0f * uniform01(seed, stream, idx) - 1.0f);
  }
}

}  // namespace colrow
