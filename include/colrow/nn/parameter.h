// Parameter: a rank's shard of one named model tensor, its gradient, and where
// the shard sits in the full tensor (core/shard_spec.h). Parameters are made
// and initialized on the CPU; to() moves them to the device the model runs on.
#pragma once

#include <cstdint>
#include <string>

#include "colrow/core/shard_spec.h"
#include "colrow/core/tensor.h"

namespace colrow {

class ParameterGroup;

// How values are drawn. Element i of the full tensor is a pure function of
// (seed, parameter name, i), so every tp degree builds the same model.
struct Init {
  enum class Kind { kZeros, kOnes, kNormal, kUniform };
  Kind kind = Kind::kZeros;
  float scale = 0.0f;  // std for kNormal, bound b of U(-b, b) for kUniform

  static Init zeros() { return {Kind::kZeros, 0.0f}; }
  static Init ones() { return {Kind::kOnes, 0.0f}; }
  static Init normal(float std) { return {Kind::kNormal, std}; }
  static Init uniform(float bound) { return {Kind::kUniform, bound}; }
  // PyTorch's nn.Linear default, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), with
  // fan_in the full (unsharded) input size.
  static Init linear_default(int64_t fan_in_full);
};

struct Parameter {
  std::string name;  // Hugging Face-style, e.g. "h.0.mlp.c_fc.weight"
  ShardSpec shard;
  Tensor value;  // local shard: shard.local_shape(); the fp32 master in mixed precision
  Tensor grad;   // same shape, fp32; backward accumulates into it
  // Mixed precision (--dtype bf16): value rounded to bf16, what forward and
  // backward read (compute()); undefined in fp32, where they read value.
  // Made by set_compute_dtype, renewed by refresh_compute after each update.
  Tensor compute_copy;
  // Replicated over tp but applied to this rank's block of tokens only
  // (sequence parallelism: norm weights, biases after a reduce-scatter), so
  // its gradient is partial over tp until the model sums it (Megatron's
  // param.sequence_parallel).
  bool sequence_parallel = false;
  // The last pipeline stage's copy of the tied word embeddings (its output
  // head). Trained like any weight, its gradient summed with the first
  // stage's, so both copies stay equal; the gradient norm and the checkpoint
  // count the first stage's only (Megatron's shared embedding).
  bool pipeline_copy = false;
  // Set while value, grad and compute_copy are views of a group's storage
  // (nn/parameter_group.h): to() and set_compute_dtype() then go through the
  // group, and refuse here (InternalError).
  ParameterGroup* group = nullptr;

  // Allocates value and grad (grad zeroed) on the CPU and fills value from `init`.
  Parameter(std::string name, ShardSpec shard, const Init& init, uint64_t seed);
  void zero_grad() { grad.zero(); }
  // Moves value, grad and the compute copy to `device` (an explicit copy;
  // nothing when already there). Not for a grouped parameter.
  void to(Device device);
  // The weights the layers compute with.
  const Tensor& compute() const { return compute_copy.owns_storage() ? compute_copy : value; }
  // kF32: layers read value; kBF16: a bf16 copy of value, made now. Not for
  // a grouped parameter.
  void set_compute_dtype(DType dtype);
  // compute_copy = value rounded, after value changed (an optimizer step, a load).
  void refresh_compute();
};

// Writes into `local` the shard `shard` of the full tensor that `init` defines
// for (seed, name). Independent of how many ranks there are.
void fill_shard(Tensor& local, const ShardSpec& shard, const Init& init, uint64_t seed,
                const std::string& name);

}  // namespace colrow
