// The segment tables of the multi-tensor launches (adamw_kernels.cuh,
// reduce_kernels.cuh): the host uploads one row per non-empty segment
// (upload_kept_table in kernels/cuda/kept_buffers.h), each with first_chunk,
// the chunks of the segments before it; block b handles chunk b of the
// concatenation and finds its segment here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "colrow/core/device.h"
#include "colrow/core/error.h"

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

// The host's side of one launch: the rows in order, the chunks (blocks)
// they take, and the device and index of the first non-empty segment
// (every other must share the device; the caller says which it takes).
template <typename Row>
struct ChunkTable {
  std::vector<Row> rows;
  int64_t chunks = 0;
  Device device;
  size_t first = 0;

  // Appends `row` (its first_chunk set here), segment `index` of `count`
  // elements on `on`, `per_chunk` elements to a chunk.
  void append(Row row, size_t index, Device on, int64_t count, int64_t per_chunk) {
    if (rows.empty()) {
      device = on;
      first = index;
    }
    row.first_chunk = chunks;
    rows.push_back(row);
    chunks += (count + per_chunk - 1) / per_chunk;
  }

  // A launch takes at most 2^31 - 1 blocks.
  void check_fits(const char* what) const {
    if (chunks > 2147483647) {
      throw InternalError(std::string(what) + ": too many elements for one launch");
    }
  }
};

}  // namespace colrow::kernels::cuda
