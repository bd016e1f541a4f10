// Parameter: a rank's shard of one named model tensor, its gradient, and where
// the shard sits in the full tensor. The placement (ShardSpec) is what the
// initializer uses now and what the checkpoint reader/writer uses later to
// compute each rank's byte ranges in an unsharded file.
#pragma once

#include <cstdint>
#include <string>

#include "colrow/core/tensor.h"

namespace colrow {

// Where a shard sits: the full shape, and the part `index` of `count` equal
// parts along `dim` (count 1 = replicated, the whole tensor on every rank).
struct ShardSpec {
  Shape full_shape;
  int dim = 0;
  int index = 0;
  int count = 1;

  static ShardSpec replicated(const Shape& full_shape) { return {full_shape, 0, 0, 1}; }
  Shape local_shape() const;
  // Whether tp_rank is the first of the ranks holding this same block (tp /
  // count replicas: a replicated tensor, a replicated KV head): the one that
  // counts it in a global sum or writes it to a file. InternalError unless
  // count divides tp_size.
  bool first_replica(int tp_rank, int tp_size) const;
  int64_t offset_along_dim() const { return local_shape()[dim] * index; }
};

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
  Tensor value;  // local shard: shard.local_shape()
  Tensor grad;   // same shape; backward accumulates into it

  // Allocates value and grad (grad zeroed) and fills value from `init`.
  Parameter(std::string name, ShardSpec shard, const Init& init, uint64_t seed);
  void zero_grad() { grad.zero(); }
};

// Writes into `local` the shard `shard` of the full tensor that `init` defines
// for (seed, name). Independent of how many ranks there are.
void fill_shard(Tensor& local, const ShardSpec& shard, const Init& init, uint64_t seed,
                const std::string& name);

}  // namespace colrow
