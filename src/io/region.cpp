// Regions of stored tensors for blocks, dim-0 ranges and shards (region.h).
#include "io/region.h"

#include "colrow/core/error.h"

namespace colrow {
namespace {

std::string range_text(int64_t start, int64_t length) {
  return "[" + std::to_string(start) + ", " + std::to_string(start + length) + ")";
}

void require_within(const std::string& where, const std::string& shape_text, const char* what,
                    int64_t start, int64_t length, int64_t size) {
  if (start < 0 || length < 0 || start > size - length) {
    throw InvalidInputError(where + " (" + shape_text + "): " + what + " " +
                            range_text(start, length) + " must lie within [0, " +
                            std::to_string(size) + ")");
  }
}

int64_t product(const Shape& shape, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t d = from; d < to; ++d) p *= shape[d];
  return p;
}

}  // namespace

Region rows_region(const std::string& where, const Shape& stored, int64_t row0, int64_t rows) {
  if (stored.empty()) {
    throw InvalidInputError(where + " is a scalar (shape []); a range of rows needs rank >= 1");
  }
  require_within(where, "shape " + shape_to_string(stored), "rows", row0, rows, stored[0]);
  const int64_t inner = product(stored, 1, stored.size());
  Region r;
  r.first = row0 * inner;
  r.count = 1;
  r.length = rows * inner;
  r.stride = r.length;
  r.block_shape = stored;
  r.block_shape[0] = rows;
  return r;
}

Region block_region(const std::string& where, const Shape& stored, int64_t row0, int64_t rows,
                    int64_t col0, int64_t cols, bool transposed) {
  if (stored.size() != 2) {
    throw InvalidInputError(where + " has shape " + shape_to_string(stored) +
                            "; a block of rows and columns needs a 2-d tensor");
  }
  Region r;
  r.block_shape = {rows, cols};
  r.transposed = transposed;
  if (!transposed) {
    const std::string text = "shape " + shape_to_string(stored);
    require_within(where, text, "rows", row0, rows, stored[0]);
    require_within(where, text, "columns", col0, cols, stored[1]);
    r.first = row0 * stored[1] + col0;
    r.count = rows;
    r.length = cols;
    r.stride = stored[1];
  } else {
    // Block of W = S^T: stored rows col0.., elements row0.. of each.
    const std::string text = "stored as " + shape_to_string(stored) + ", read transposed as " +
                             shape_to_string({stored[1], stored[0]});
    require_within(where, text, "rows", row0, rows, stored[1]);
    require_within(where, text, "columns", col0, cols, stored[0]);
    r.first = col0 * stored[1] + row0;
    r.count = cols;
    r.length = rows;
    r.stride = stored[1];
  }
  return r;
}

Region shard_region(const std::string& where, const Shape& stored, const ShardSpec& shard,
                    bool transposed) {
  if (transposed && stored.size() != 2) {
    throw InvalidInputError(where + " has shape " + shape_to_string(stored) +
                            "; only a 2-d tensor can be read or written transposed");
  }
  const Shape colrow_shape = transposed ? Shape{stored[1], stored[0]} : stored;
  if (shard.full_shape != colrow_shape) {
    throw InvalidInputError(where + ": shape in the file (" + shape_to_string(stored) + ") must " +
                            (transposed ? "be the transpose of" : "equal") + " the model's (" +
                            shape_to_string(shard.full_shape) +
                            "). The checkpoint was made for another model configuration.");
  }
  if (shard.count == 1) {
    if (transposed) return block_region(where, stored, 0, stored[1], 0, stored[0], true);
    Region r;
    r.count = 1;
    r.length = shape_numel(stored);
    r.stride = r.length;
    r.block_shape = stored;
    return r;
  }
  const Shape local = shard.local_shape();  // validates dim, index and divisibility
  const int64_t offset = shard.offset_along_dim();
  const int64_t local_size = local[shard.dim];
  if (transposed) {
    return shard.dim == 0 ? block_region(where, stored, offset, local_size, 0, stored[0], true)
                          : block_region(where, stored, 0, stored[1], offset, local_size, true);
  }
  // [outer, size, inner] view of the tensor around the sharded dim.
  const int64_t outer = product(stored, 0, shard.dim);
  const int64_t inner = product(stored, shard.dim + 1, stored.size());
  Region r;
  r.first = offset * inner;
  r.count = outer;
  r.length = local_size * inner;
  r.stride = stored[shard.dim] * inner;
  r.block_shape = local;
  return r;
}

}  // namespace colrow
