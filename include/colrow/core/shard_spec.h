// ShardSpec: where a rank's shard sits in a full (unsharded) tensor. The
// initializer draws each element by its full index from it, the checkpoint
// reader and writer compute each rank's byte ranges in an unsharded file from
// it, and the gradient norm counts replicated blocks once by it.
#pragma once

#include <vector>

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

}  // namespace colrow
