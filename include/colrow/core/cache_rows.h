// CacheRows: where one incremental-decoding step's new tokens sit in a KV
// cache (nn/kv_cache.h). Sequence b of the step lives in cache slot slots[b];
// its n_new tokens take positions [starts[b], starts[b] + n_new) and are rows
// [b n_new, (b+1) n_new) of the step's token-major activations. Shared by the
// model (nn/) and the kernels that read and write the cache (kernels/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace colrow {

struct CacheRows {
  std::vector<int64_t> slots;
  std::vector<int64_t> starts;
  int64_t n_new = 0;

  // The position of every row of the step, in row order.
  std::vector<int32_t> positions() const {
    std::vector<int32_t> out;
    out.reserve(slots.size() * static_cast<std::size_t>(n_new));
    for (int64_t start : starts) {
      for (int64_t i = 0; i < n_new; ++i) out.push_back(static_cast<int32_t>(start + i));
    }
    return out;
  }
};

}  // namespace colrow
