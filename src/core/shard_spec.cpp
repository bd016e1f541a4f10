// ShardSpec's arithmetic (see include/colrow/core/shard_spec.h).
#include "colrow/core/shard_spec.h"

#include "colrow/core/error.h"

namespace colrow {

Shape ShardSpec::local_shape() const {
  Shape s = full_shape;
  if (count < 1 || dim < 0 || dim >= static_cast<int>(s.size()) || s[dim] % count != 0 ||
      index < 0 || index >= count) {
    throw InternalError("[shard] cannot take part " + std::to_string(index) + " of " +
                        std::to_string(count) + " along dim " + std::to_string(dim) + " of " +
                        shape_to_string(full_shape));
  }
  s[dim] /= count;
  return s;
}

bool ShardSpec::first_replica(int tp_rank, int tp_size) const {
  if (count < 1 || tp_size % count != 0) {
    throw InternalError("[shard] shard count (" + std::to_string(count) + ") must divide tp (" +
                        std::to_string(tp_size) + ").");
  }
  return tp_rank % (tp_size / count) == 0;
}

}  // namespace colrow
