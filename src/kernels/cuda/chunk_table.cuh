// The segment tables of the multi-tensor launches (kernels/cuda/adamw.cu,
// kernels/cuda/reduce.cu): the host uploads one row per non-empty segment
// (upload_table in kernels/cuda/operands.h), each with first_chunk, the
// chunks of the segments before it; block b handles chunk b of the
// concatenation and finds its segment here.
#pragma once

#include <cstdint>

namespace colrow::kernels::cuda {

// The last of the n_rows rows whose first_chunk <= chunk, by binary search
// (rows in order, table[0].first_chunk = 0).
template <typename Row>
__device__ __forceinline__ const Row& row_of_chunk(const Row* table, int64_t n_rows,
                                                   int64_t chunk) {
  int64_t lo = 0, hi = n_rows - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (table[mid].first_chunk <= chunk) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return table[lo];
}

}  // namespace colrow::kernels::cuda
