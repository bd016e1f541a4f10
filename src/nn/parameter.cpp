// TP-invariant parameter initialization: each rank computes the full-tensor
// index of each of its elements and draws it from Philox (core/philox.h).
#include "colrow/nn/parameter.h"

#include <cmath>

#include "colrow/core/error.h"
#include "colrow/core/philox.h"
#include "kernels/ops.h"

namespace colrow {

using ops::RandomFill;

Init Init::linear_default(int64_t fan_in_full) {
  return uniform(static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in_full))));
}

Parameter::Parameter(std::string name_, ShardSpec shard_, const Init& init, uint64_t seed)
    : name(std::move(name_)), shard(std::move(shard_)) {
  value = Tensor::empty(shard.local_shape());
  grad = Tensor::zeros(shard.local_shape());
  fill_shard(value, shard, init, seed, name);
}

namespace {

void require_ungrouped(const Parameter& p, const char* what) {
  if (p.group != nullptr) {
    throw InternalError("[parameter] " + p.name + " lives in a group's storage: " + what +
                        " goes through its ParameterGroup (nn/parameter_group.h)");
  }
}

}  // namespace

void Parameter::to(Device device) {
  require_ungrouped(*this, "to(device)");
  value = value.to(device);
  grad = grad.to(device);
  if (compute_copy.owns_storage()) compute_copy = compute_copy.to(device);
}

void Parameter::set_compute_dtype(DType dtype) {
  require_ungrouped(*this, "set_compute_dtype");
  if (dtype == DType::kF32) {
    compute_copy = Tensor();
    return;
  }
  compute_copy = Tensor::empty(value.shape(), value.device(), dtype);
  refresh_compute();
}

void Parameter::refresh_compute() {
  if (compute_copy.owns_storage()) ops::convert(value, compute_copy);
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
  RandomFill fill;
  fill.full_shape = shard.full_shape;
  fill.dim = shard.dim;
  fill.offset_along_dim = shard.offset_along_dim();
  fill.normal = init.kind == Init::Kind::kNormal;
  fill.scale = init.scale;
  fill.seed = seed;
  fill.stream = name_stream(name);
  ops::fill_random(local, fill);
}

}  // namespace colrow
