// Region: the elements of a stored row-major tensor that a block, a dim-0 range
// or a shard covers, as `count` runs of `length` contiguous elements, `stride`
// elements apart, from element `first`. The safetensors reader and writer turn
// a region into one pread/pwrite per run, or one in all when the runs abut.
// Bounds are checked here, with messages that name the file and the tensor.
#pragma once

#include <cstdint>
#include <string>

#include "colrow/core/shard_spec.h"
#include "colrow/core/tensor.h"

namespace colrow {

struct Region {
  int64_t first = 0;   // element of the stored tensor where run 0 starts
  int64_t count = 0;   // runs
  int64_t length = 0;  // elements per run
  int64_t stride = 0;  // elements from one run's start to the next
  // The runs, stacked, are a [count, length] matrix; the block is that matrix,
  // or (transposed) its transpose [length, count].
  bool transposed = false;
  Shape block_shape;  // colrow's orientation

  int64_t numel() const { return count * length; }
  // One pread/pwrite covers every run.
  bool contiguous() const { return count <= 1 || stride == length; }
};

// `where` opens every message: "[safetensors] <file>: tensor \"<name>\"".
// Rows [row0, row0 + rows) along dim 0 of a stored tensor of rank >= 1.
Region rows_region(const std::string& where, const Shape& stored, int64_t row0, int64_t rows);
// The [rows, cols] block at (row0, col0) of a stored 2-d tensor S, or, when
// transposed, of S^T (see include/colrow/io/safetensors.h).
Region block_region(const std::string& where, const Shape& stored, int64_t row0, int64_t rows,
                    int64_t col0, int64_t cols, bool transposed);
// A ShardSpec's part of colrow's tensor, whose full shape must be the stored
// shape or, when transposed, its transpose.
Region shard_region(const std::string& where, const Shape& stored, const ShardSpec& shard,
                    bool transposed);

}  // namespace colrow
