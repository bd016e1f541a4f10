// The per-rank KV cache: storage and the fill level of each slot.
#include "colrow/nn/kv_cache.h"

#include <string>

#include "colrow/core/error.h"

namespace colrow {

KvCache::KvCache(int n_layer, int64_t slots, int64_t kv_heads_local, int64_t capacity,
                 int64_t head_dim, Device device, DType dtype)
    : capacity_(capacity), lengths_(slots > 0 ? slots : 0, 0) {
  if (n_layer < 1 || slots < 1 || kv_heads_local < 1 || capacity < 1 || head_dim < 1) {
    throw InternalError("[kv_cache] layers (" + std::to_string(n_layer) + "), slots (" +
                        std::to_string(slots) + "), kv heads (" + std::to_string(kv_heads_local) +
                        "), capacity (" + std::to_string(capacity) + ") and head_dim (" +
                        std::to_string(head_dim) + ") must be positive");
  }
  for (int layer = 0; layer < n_layer; ++layer) {
    keys_.push_back(Tensor::zeros({slots, kv_heads_local, capacity, head_dim}, device, dtype));
    values_.push_back(Tensor::zeros({slots, kv_heads_local, capacity, head_dim}, device, dtype));
  }
}

int64_t KvCache::bytes_per_position() const {
  int64_t total = 0;
  for (const Tensor& k : keys_) {
    total += 2 * k.size(1) * k.size(3) * dtype_bytes(k.dtype());  // keys and values
  }
  return total;
}

}  // namespace colrow
